// Package zktest starts a real ZooKeeper server for tests: the operating
// system's package (Debian's zookeeper, run standalone with its own Java
// class path), on a free loopback port, with a data folder of the test's
// own, stopped when the test ends. Nothing here mocks ZooKeeper.
//
// A missing package fails the test (make test installs it); it never skips.
package zktest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TickTime is the server's tick: sessions may last from 2 to 20 ticks, so
// a test can let one expire in about a second.
const TickTime = 100 * time.Millisecond

// jars is where Debian's zookeeper package puts the server's class path.
var jars = []string{"/usr/share/java/zookeeper.jar"}

// Server is one running ZooKeeper server (standalone).
type Server struct {
	Port int
	dir  string
	t    testing.TB

	mu  sync.Mutex
	cmd *exec.Cmd
}

// Addr returns the server's address, 127.0.0.1:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.Port) }

// Start starts a ZooKeeper server on a free loopback port and waits until
// it answers "ruok".
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{Port: redistest.FreePort(t, false), dir: t.TempDir(), t: t}
	cfg := fmt.Sprintf("tickTime=%d\ndataDir=%s\nclientPort=%d\nclientPortAddress=127.0.0.1\n"+
		"maxClientCnxns=0\nadmin.enableServer=false\n4lw.commands.whitelist=ruok,srvr\n",
		TickTime.Milliseconds(), filepath.Join(s.dir, "data"), s.Port)
	if err := os.WriteFile(filepath.Join(s.dir, "zoo.cfg"), []byte(cfg), 0o600); err != nil {
		t.Fatalf("zktest: %v", err)
	}
	s.start()
	t.Cleanup(s.Stop)
	return s
}

func (s *Server) start() {
	s.t.Helper()
	java, err := exec.LookPath("java")
	if err != nil {
		s.t.Fatalf("zktest: java not found (install the zookeeper package: make deps): %v", err)
	}
	for _, j := range jars {
		if _, err := os.Stat(j); err != nil {
			s.t.Fatalf("zktest: %s missing (install the zookeeper package: make deps): %v", j, err)
		}
	}
	s.mu.Lock()
	cmd := exec.Command(java, "-Xms32m", "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
		"-Dzookeeper.admin.enableServer=false", "-Dzookeeper.jmx.log4j.disable=true",
		"-cp", strings.Join(jars, ":"), "org.apache.zookeeper.server.ZooKeeperServerMain", filepath.Join(s.dir, "zoo.cfg"))
	cmd.Dir = s.dir
	logf, err := os.Create(filepath.Join(s.dir, "server.log"))
	if err != nil {
		s.mu.Unlock()
		s.t.Fatalf("zktest: %v", err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		s.mu.Unlock()
		s.t.Fatalf("zktest: start zookeeper: %v", err)
	}
	s.cmd = cmd
	s.mu.Unlock()
	go func() { _ = cmd.Wait(); logf.Close() }()
	if err := waitOK(s.Addr(), 60*time.Second); err != nil {
		log, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
		s.t.Fatalf("zktest: zookeeper on %s did not answer: %v\n%s", s.Addr(), err, log)
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
	redistest.WaitClosed(s.Addr(), 10*time.Second)
}

// Restart starts a stopped server again on the same port and data folder:
// the znodes survive, as they do when a real ensemble member restarts. A
// server that still runs is left running (starting a second one on its
// port would fail to bind while the first kept answering, and the first
// would outlive the test); stop it first to restart it.
func (s *Server) Restart() {
	s.mu.Lock()
	running := s.cmd != nil
	s.mu.Unlock()
	if !running {
		s.start()
	}
}

// waitOK waits until "ruok" on addr gets "imok".
func waitOK(addr string, within time.Duration) error {
	deadline := time.Now().Add(within)
	var last error
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			_ = c.SetDeadline(time.Now().Add(time.Second))
			_, err = c.Write([]byte("ruok"))
			if err == nil {
				line, rerr := bufio.NewReader(c).ReadString('\n')
				if strings.HasPrefix(line, "imok") {
					c.Close()
					return nil
				}
				err = fmt.Errorf("reply %q: %v", line, rerr)
			}
			c.Close()
		}
		last = err
		time.Sleep(50 * time.Millisecond)
	}
	return last
}
