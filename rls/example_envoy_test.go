package rls_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/sidecar/daemon"
)

// The example Envoy configuration is a valid Envoy bootstrap (decoded
// strictly into Envoy's own types and validated by their rules), its
// ratelimit filter points at the rls.listen of the sluice configuration
// beside it, and the domain it sends is one that configuration's rules use.
func TestExampleEnvoyConfig(t *testing.T) {
	data, err := os.ReadFile("../examples/envoy/envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var bs bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(js, &bs); err != nil {
		t.Fatalf("not an Envoy bootstrap: %v", err)
	}
	if err := bs.ValidateAll(); err != nil {
		t.Fatalf("Envoy's validation: %v", err)
	}
	var rl ratelimitv3.RateLimit
	var hcm hcmv3.HttpConnectionManager
	if err := bs.StaticResources.Listeners[0].FilterChains[0].Filters[0].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
		t.Fatal(err)
	}
	for _, f := range hcm.HttpFilters {
		if f.Name == "envoy.filters.http.ratelimit" {
			if err := f.GetTypedConfig().UnmarshalTo(&rl); err != nil {
				t.Fatal(err)
			}
		}
	}
	cluster := rl.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName()
	var rlsPort uint32
	for _, c := range bs.StaticResources.Clusters {
		if c.Name == cluster {
			rlsPort = c.LoadAssignment.Endpoints[0].LbEndpoints[0].GetEndpoint().Address.GetSocketAddress().GetPortValue()
		}
	}
	cfg, err := config.Load("../examples/envoy/sluice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(cfg.RLS.Listen, ":"+itoa(rlsPort)) || rlsPort == 0 {
		t.Errorf("Envoy asks port %d (cluster %q); sluice's rls.listen is %s", rlsPort, cluster, cfg.RLS.Listen)
	}
	used := false
	for _, r := range cfg.Rules {
		used = used || (r.Descriptor != nil && r.Descriptor.Domain == rl.Domain)
	}
	if !used {
		t.Errorf("Envoy sends domain %q; no sluice rule uses it", rl.Domain)
	}
	// The sidecar builds from it, with the envoyproxy/ratelimit file's
	// rules beside its own.
	srv, err := daemon.New(cfg, "../examples/envoy/sluice.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Engine.Close()
	var ids []string
	for _, r := range srv.Engine.State().Rules {
		ids = append(ids, r.RuleID)
	}
	if strings.Join(ids, ",") != "per_ip,logins,edge.user,edge.user_batch-_" {
		t.Errorf("rules %v", ids)
	}
}

func itoa(n uint32) string {
	b, _ := json.Marshal(n)
	return string(b)
}
