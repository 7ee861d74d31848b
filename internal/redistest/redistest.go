// Package redistest starts real Redis servers for tests: a single node, a
// three-master Cluster, or a master with a replica watched by a Sentinel, all
// from the operating system's redis-server and redis-sentinel binaries, on
// free loopback ports, stopped when the test ends. Nothing here mocks Redis.
//
// A missing binary fails the test (make test installs them); it never skips.
package redistest

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/tlstest"
)

// Server is one running redis-server or redis-sentinel process.
type Server struct {
	Port int
	// TLSPort is the port that speaks TLS (StartTLS); 0 for none.
	TLSPort int
	dir     string
	args    []string
	bin     string
	t       testing.TB

	mu  sync.Mutex
	cmd *exec.Cmd
}

// Addr returns the server's address, 127.0.0.1:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.Port) }

// TLSAddr returns the address of the server's TLS port (StartTLS).
func (s *Server) TLSAddr() string { return "127.0.0.1:" + strconv.Itoa(s.TLSPort) }

// StartTLS starts redis-server as Start does, and also on a TLS port that
// presents files' server certificate (internal/tlstest); with mutual, a
// TLS client must present a certificate the files' CA signed. The plain
// port stays open for the harness's own commands (Do, InfoField).
func StartTLS(t testing.TB, files tlstest.Files, mutual bool, extra ...string) *Server {
	t.Helper()
	auth := "no"
	if mutual {
		auth = "yes"
	}
	port := FreePort(t, false)
	s := Start(t, append([]string{"--tls-port", strconv.Itoa(port), "--tls-cert-file", files.ServerCert,
		"--tls-key-file", files.ServerKey, "--tls-ca-cert-file", files.CA, "--tls-auth-clients", auth}, extra...)...)
	s.TLSPort = port
	return s
}

// FreePort returns a loopback port that was free for TCP and UDP a moment
// ago. With cluster set, port+10000 (the cluster bus) was free too.
//
// The port is drawn from below the kernel's ephemeral range, so no process
// binding 127.0.0.1:0 (a sluice started with -listen 127.0.0.1:0, a client's
// outgoing connection) can be handed it between this check and the server's
// own bind: a port taken from the ephemeral range can, and was (a gossip bind
// collided with another sidecar's listener in CI).
func FreePort(t testing.TB, cluster bool) int {
	t.Helper()
	lo, hi := belowEphemeral()
	if cluster {
		hi -= 10000
	}
	for range 200 {
		port := lo + rand.IntN(hi-lo)
		if bindable(port) && (!cluster || bindable(port+10000)) {
			return port
		}
	}
	t.Fatal("redistest: no free port below the ephemeral range")
	return 0
}

// belowEphemeral is the range [lo, hi) of ports FreePort draws from: from
// 10000 up to the start of the kernel's ephemeral range (32768 when it cannot
// be read).
func belowEphemeral() (lo, hi int) {
	lo, hi = 10000, 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > lo+10000+1000 {
				hi = n
			}
		}
	}
	return lo, hi
}

// bindable reports whether port is free on 127.0.0.1 for both TCP and UDP
// (memberlist gossips over both).
func bindable(port int) bool {
	addr := "127.0.0.1:" + strconv.Itoa(port)
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	defer l.Close()
	u, err := net.ListenPacket("udp", addr)
	if err != nil {
		return false
	}
	u.Close()
	return true
}

func binary(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("redistest: %s not found on PATH (run `make deps` or install the OS package): %v", name, err)
	}
	return p
}

// Start starts redis-server on a free port with extra configuration
// directives ("--name value" pairs) and waits until it answers PING.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	cluster := false
	for _, a := range extra {
		if a == "--cluster-enabled" {
			cluster = true
		}
	}
	port := FreePort(t, cluster)
	dir := t.TempDir()
	args := append([]string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--save", "", "--appendonly", "no", "--protected-mode", "no",
	}, extra...)
	s := &Server{Port: port, dir: dir, args: args, bin: binary(t, "redis-server"), t: t}
	s.start()
	t.Cleanup(s.Stop)
	return s
}

func (s *Server) start() {
	s.t.Helper()
	s.mu.Lock()
	cmd := exec.Command(s.bin, s.args...)
	cmd.Dir = s.dir
	logf, err := os.Create(filepath.Join(s.dir, "server.log"))
	if err != nil {
		s.mu.Unlock()
		s.t.Fatalf("redistest: %v", err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		s.mu.Unlock()
		s.t.Fatalf("redistest: start %s: %v", s.bin, err)
	}
	s.cmd = cmd
	s.mu.Unlock()
	go func() { _ = cmd.Wait(); logf.Close() }()
	if err := waitPing(s.Addr(), 10*time.Second); err != nil {
		log, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
		s.t.Fatalf("redistest: %s on %s did not answer: %v\n%s", filepath.Base(s.bin), s.Addr(), err, log)
	}
}

// Stop kills the server and waits until its port no longer answers.
func (s *Server) Stop() {
	s.mu.Lock()
	cmd := s.cmd
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Kill()
	WaitClosed(s.Addr(), 5*time.Second)
}

// WaitClosed waits, up to within, until nothing accepts connections on
// addr: a killed server's port is free again (for the harnesses of other
// servers too).
func WaitClosed(addr string, within time.Duration) {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err != nil {
			return
		}
		c.Close()
		time.Sleep(10 * time.Millisecond)
	}
}

// Restart starts a stopped server again on the same port and data folder.
func (s *Server) Restart() { s.start() }

// Do sends one command and returns the raw reply, for test set-up and
// inspection (INFO, CLUSTER INFO, SENTINEL ...). It uses redis-cli.
func (s *Server) Do(args ...string) (string, error) {
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		return "", fmt.Errorf("redis-cli not found: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, cli, append([]string{"-h", "127.0.0.1", "-p", strconv.Itoa(s.Port)}, args...)...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// InfoField returns one field of INFO section (e.g. "commandstats",
// "cmdstat_evalsha"), or "" when absent.
func (s *Server) InfoField(section, field string) string {
	out, err := s.Do("INFO", section)
	if err != nil {
		return ""
	}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if ok && k == field {
			return v
		}
	}
	return ""
}

// waitPing waits until a PING on addr gets +PONG.
func waitPing(addr string, within time.Duration) error {
	deadline := time.Now().Add(within)
	var last error
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			_ = c.SetDeadline(time.Now().Add(500 * time.Millisecond))
			_, err = c.Write([]byte("PING\r\n"))
			if err == nil {
				line, rerr := bufio.NewReader(c).ReadString('\n')
				if rerr == nil && strings.HasPrefix(line, "+PONG") {
					c.Close()
					return nil
				}
				err = fmt.Errorf("reply %q: %v", line, rerr)
			}
			c.Close()
		}
		last = err
		time.Sleep(20 * time.Millisecond)
	}
	return last
}

// Cluster is a running three-master Redis Cluster.
type Cluster struct {
	Masters []*Server
}

// Addrs returns the masters' addresses.
func (c *Cluster) Addrs() []string {
	var out []string
	for _, m := range c.Masters {
		out = append(out, m.Addr())
	}
	return out
}

// StartCluster starts three cluster-enabled nodes, joins them with
// `redis-cli --cluster create`, and waits until every node reports
// cluster_state:ok.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	c := &Cluster{}
	for i := 0; i < 3; i++ {
		c.Masters = append(c.Masters, Start(t, "--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000"))
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := c.Masters[0].Do(args...); err != nil {
		t.Fatalf("redistest: cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, m := range c.Masters {
		for {
			if strings.Contains(m.InfoFieldCluster(), "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("redistest: cluster never reached state ok on %s", m.Addr())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return c
}

// InfoFieldCluster returns CLUSTER INFO.
func (s *Server) InfoFieldCluster() string {
	out, _ := s.Do("CLUSTER", "INFO")
	return out
}

// Sentinel is a master, one replica and one Sentinel watching them.
type Sentinel struct {
	Master, Replica, Sentinel *Server
	// MasterName is the name the Sentinel knows the master by.
	MasterName string
}

// StartSentinel starts a master, a replica of it, and a Sentinel that
// monitors the master with a quorum of one, and waits until the Sentinel has
// found the replica.
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	master := Start(t)
	replica := Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(master.Port))
	port := FreePort(t, false)
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	body := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nprotected-mode no\n"+
		"sentinel monitor sluice 127.0.0.1 %d 1\n"+
		"sentinel down-after-milliseconds sluice 1000\n"+
		"sentinel failover-timeout sluice 5000\n"+
		"sentinel parallel-syncs sluice 1\n", port, dir, master.Port)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	s := &Server{Port: port, dir: dir, args: []string{conf}, bin: binary(t, "redis-sentinel"), t: t}
	s.start()
	t.Cleanup(s.Stop)
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, _ := s.Do("SENTINEL", "REPLICAS", "sluice")
		if strings.Contains(out, strconv.Itoa(replica.Port)) && strings.Contains(replica.InfoField("replication", "master_link_status"), "up") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: sentinel never saw the replica: %s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return &Sentinel{Master: master, Replica: replica, Sentinel: s, MasterName: "sluice"}
}

// Failover asks the Sentinel to promote the replica, and waits until it
// reports the replica as the master.
func (s *Sentinel) Failover(t testing.TB) {
	t.Helper()
	if out, err := s.Sentinel.Do("SENTINEL", "FAILOVER", s.MasterName); err != nil || !strings.Contains(out, "OK") {
		t.Fatalf("redistest: SENTINEL FAILOVER: %v %s", err, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, _ := s.Sentinel.Do("SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.MasterName)
		if strings.Contains(out, strconv.Itoa(s.Replica.Port)) && s.Replica.InfoField("replication", "role") == "master" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: failover did not complete: %s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
