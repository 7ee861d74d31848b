// Package gossip is a fleet.Transport with no store between the sidecars:
// they form a cluster with github.com/hashicorp/memberlist (SWIM membership
// and failure detection) and each sends its usage to every live member every
// sync. A member that leaves, or that the failure detector declares dead,
// is reported to the fleet store as gone, so that its requests in flight
// stop counting.
//
// Messages are unauthenticated and unencrypted: bind to loopback or a
// private network only.
package gossip

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/sluicehq/sluice/static"
	"github.com/sluicehq/sluice/static/fleet"
)

// Config configures a Gossip transport.
type Config struct {
	// Node names this sidecar; default the bind address.
	Node string
	// Bind is the host:port to listen on (UDP and TCP); port 0 picks one.
	Bind string
	// Join are members to join at start (host:port). Joining is retried in
	// the background until one answers.
	Join []string
}

// maxInbox bounds the usages received and not yet taken by Exchange.
const maxInbox = 200_000

// packetSize is the most a UDP message carries; larger batches are split.
const packetSize = 1200

// Gossip is a fleet.Transport over memberlist.
type Gossip struct {
	ml   *memberlist.Memberlist
	node string
	dec  fleet.Decoder

	mu      sync.Mutex
	inbox   []fleet.Batch
	queued  int
	dropped uint64
	bad     uint64

	stop      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// New starts a member and begins joining cfg.Join.
func New(cfg Config) (*Gossip, error) {
	host, portStr, err := net.SplitHostPort(cfg.Bind)
	if err != nil {
		return nil, fmt.Errorf("gossip: bind: %w", err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 0 || port > 65535 {
		return nil, fmt.Errorf("gossip: bind: bad port %q", portStr)
	}
	g := &Gossip{stop: make(chan struct{})}
	mc := memberlist.DefaultLANConfig()
	mc.BindAddr, mc.BindPort = host, port
	mc.AdvertiseAddr, mc.AdvertisePort = host, port
	mc.Delegate, mc.Events = (*delegate)(g), (*events)(g)
	mc.Logger = log.New(io.Discard, "", 0)
	// Failure detection in about two seconds on a LAN.
	mc.ProbeInterval, mc.ProbeTimeout, mc.SuspicionMult = 500*time.Millisecond, 200*time.Millisecond, 3
	mc.GossipInterval = 100 * time.Millisecond
	mc.TCPTimeout = time.Second
	if port == 0 {
		// memberlist needs the port before it binds: take a free one.
		l, err := net.Listen("tcp", cfg.Bind)
		if err != nil {
			return nil, fmt.Errorf("gossip: bind: %w", err)
		}
		mc.BindPort = l.Addr().(*net.TCPAddr).Port
		mc.AdvertisePort = mc.BindPort
		l.Close()
	}
	mc.Name = cfg.Node
	if mc.Name == "" {
		mc.Name = net.JoinHostPort(host, strconv.Itoa(mc.BindPort))
	}
	g.node = mc.Name
	ml, err := memberlist.Create(mc)
	if err != nil {
		return nil, fmt.Errorf("gossip: %w", err)
	}
	g.ml = ml
	if len(cfg.Join) > 0 {
		g.wg.Add(1)
		go g.join(cfg.Join)
	}
	return g, nil
}

// Node returns this member's name.
func (g *Gossip) Node() string { return g.node }

// Addr returns the address other members join.
func (g *Gossip) Addr() string {
	n := g.ml.LocalNode()
	return net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port)))
}

func (g *Gossip) join(peers []string) {
	defer g.wg.Done()
	for {
		if n, _ := g.ml.Join(peers); n > 0 {
			return
		}
		select {
		case <-g.stop:
			return
		case <-time.After(time.Second):
		}
	}
}

// Exchange implements fleet.Transport: out goes to every live member, in
// UDP packets (a usage too large for one goes over TCP); the batches
// received since the previous call are returned.
func (g *Gossip) Exchange(_ context.Context, out fleet.Batch) ([]fleet.Batch, error) {
	if len(out.Usages) > 0 {
		members := g.ml.Members()
		var msgs [][]byte
		part := fleet.Batch{Node: out.Node, Sent: out.Sent}
		size := 0
		flush := func() {
			if len(part.Usages) > 0 {
				msgs = append(msgs, fleet.Encode(nil, &part))
			}
			part.Usages, size = nil, 0
		}
		var one []byte
		for i := range out.Usages {
			one = fleet.AppendUsage(one[:0], &out.Usages[i])
			if size+len(one) > packetSize-64 {
				flush()
			}
			part.Usages = append(part.Usages, out.Usages[i])
			size += len(one)
		}
		flush()
		for _, m := range members {
			if m.Name == g.node {
				continue
			}
			for _, msg := range msgs {
				if len(msg) > packetSize {
					_ = g.ml.SendReliable(m, msg)
				} else {
					_ = g.ml.SendBestEffort(m, msg)
				}
			}
		}
	}
	g.mu.Lock()
	in := g.inbox
	g.inbox, g.queued = nil, 0
	g.mu.Unlock()
	return in, nil
}

// Member is one member of the cluster as this one sees it.
type Member struct {
	// Name and Addr identify it.
	Name, Addr string
	// State is alive, suspect, dead or left.
	State string
}

// Members returns the members this one knows, itself included.
func (g *Gossip) Members() []Member {
	var ms []Member
	for _, n := range g.ml.Members() {
		ms = append(ms, Member{Name: n.Name, Addr: net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port))), State: stateName(n.State)})
	}
	return ms
}

func stateName(s memberlist.NodeStateType) string {
	switch s {
	case memberlist.StateAlive:
		return "alive"
	case memberlist.StateSuspect:
		return "suspect"
	case memberlist.StateDead:
		return "dead"
	case memberlist.StateLeft:
		return "left"
	}
	return "unknown"
}

// Dropped counts usages dropped because the inbox was full, and Malformed
// messages refused.
func (g *Gossip) Dropped() (dropped, malformed uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.dropped, g.bad
}

// Close leaves the cluster (telling the others, so that they stop counting
// this member at once) and stops. Later calls return the first's result.
func (g *Gossip) Close() error {
	g.closeOnce.Do(func() {
		close(g.stop)
		g.wg.Wait()
		err := g.ml.Leave(time.Second)
		g.closeErr = errors.Join(err, g.ml.Shutdown())
	})
	return g.closeErr
}

func (g *Gossip) push(b fleet.Batch) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.queued+len(b.Usages) > maxInbox {
		g.dropped += uint64(len(b.Usages))
		return
	}
	g.queued += len(b.Usages)
	g.inbox = append(g.inbox, b)
}

// delegate receives user messages.
type delegate Gossip

func (d *delegate) NodeMeta(int) []byte { return nil }

func (d *delegate) NotifyMsg(msg []byte) {
	g := (*Gossip)(d)
	b, err := g.dec.Decode(msg)
	if err != nil || b.Gone {
		g.mu.Lock()
		g.bad++
		g.mu.Unlock()
		return
	}
	g.push(b)
}

func (d *delegate) GetBroadcasts(int, int) [][]byte     { return nil }
func (d *delegate) LocalState(bool) []byte              { return nil }
func (d *delegate) MergeRemoteState(buf []byte, _ bool) {}

// events turns a member's departure into a Gone batch.
type events Gossip

func (e *events) NotifyJoin(*memberlist.Node)   {}
func (e *events) NotifyUpdate(*memberlist.Node) {}
func (e *events) NotifyLeave(n *memberlist.Node) {
	(*Gossip)(e).push(fleet.Batch{Node: n.Name, Sent: time.Now(), Gone: true, Usages: []static.Usage(nil)})
}
