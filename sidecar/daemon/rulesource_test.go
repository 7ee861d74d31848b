package daemon_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/zktest"
	"github.com/sluicehq/sluice/zkrules"
)

// ZooKeeper is down when the sidecar starts and there is no cache: it is
// not ready and enforces nothing from the source until ZooKeeper answers;
// then a bad znode is refused and reported while the good ones apply.
func TestZooKeeperDownAtStart(t *testing.T) {
	zk := zktest.Start(t)
	zk.Stop()
	s := startServer(t, fmt.Sprintf(`upstream: http://127.0.0.1:1
adaptive: {algorithm: off}
rules_source:
  zookeeper: {servers: [%q], session_timeout: 2s}
`, zk.Addr()))
	if s.Engine.Ready() {
		t.Fatal("ready with ZooKeeper down and no cache")
	}
	if st := s.Engine.State().RulesSource; st == nil || st.Connected || st.Loaded {
		t.Fatalf("rules_source %+v, want not connected, not loaded", st)
	}
	zk.Restart()
	c, err := zkrules.Dial([]string{zk.Addr()}, config.DefaultZooKeeperPath, 30*time.Second, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Push(map[string][]byte{
		"good": []byte(`{"rule_id":"good","identifier_type":"global","algorithm":"gcra","limit":5,"window":"1s"}`),
		"bad":  []byte(`{"rule_id":"bad","identifier_type":"global","algorithm":"gcra","limit":5,"window":"1s","typo":1}`),
	}, false); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !s.Engine.Ready() { // the push creates the parent and its rules at once: the first set has them
		if time.Now().After(deadline) {
			t.Fatalf("not ready after ZooKeeper came back: %+v", s.Engine.State().RulesSource)
		}
		time.Sleep(20 * time.Millisecond)
	}
	st := s.Engine.State()
	if len(st.Rules) != 1 || st.Rules[0].RuleID != "good" {
		t.Errorf("rules %+v, want only good", st.Rules)
	}
	if rs := st.RulesSource; len(rs.Refused) != 1 || rs.Refused[0].ZNode != "bad" || rs.Refused[0].Kept {
		t.Errorf("refused %+v", rs.Refused)
	}
	if n, err := testutil.GatherAndCount(s.Engine.Metrics().Gatherer, "sluice_rules_source_refused"); err != nil || n != 1 {
		t.Errorf("sluice_rules_source_refused series: %d %v", n, err)
	}
}
