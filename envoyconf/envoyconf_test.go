package envoyconf_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/envoyconf"
)

// Every good file converts; the rules validate in a sluice configuration;
// Marshal's output parses back to the same rules.
func TestGoodFiles(t *testing.T) {
	files, _ := filepath.Glob("testdata/good/*.yaml")
	rules, err := envoyconf.Load(files...)
	if err != nil {
		t.Fatal(err)
	}
	base, err := config.Parse("t.yaml", []byte("{}"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := base.WithRules(rules); err != nil {
		t.Fatal(err)
	}
	out, err := envoyconf.Marshal(rules)
	if err != nil {
		t.Fatal(err)
	}
	back, err := config.Parse("out.yaml", out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	want, _ := base.WithRules(rules)
	if !reflect.DeepEqual(back.Rules, want.Rules) {
		t.Errorf("round trip differs:\n%s", out)
	}
}

// What each envoyproxy/ratelimit feature becomes.
func TestFeatures(t *testing.T) {
	rules, _, err := envoyconf.Parse("features.yaml", mustRead(t, "testdata/good/features.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]config.Rule{}
	for _, r := range rules {
		byID[r.RuleID] = r
	}
	check := func(id string, ok func(config.Rule) bool) {
		t.Helper()
		r, found := byID[id]
		if !found || !ok(r) {
			t.Errorf("%s: %+v (found %v); rules %v", id, r, found, keys(byID))
		}
	}
	check("features.remote_address", func(r config.Rule) bool {
		return r.Algorithm == "fixed_window" && *r.Limit == 10 && r.Window.D() == time.Second && r.Descriptor.Entries[0] == config.DescriptorEntry{Key: "remote_address"}
	})
	check("features.remote_address_50.0.0.5", func(r config.Rule) bool { return *r.Limit == 0 })
	check("features.ldap", func(r config.Rule) bool { return r.Descriptor.Unlimited && r.Limit == nil && r.Algorithm == "" })
	check("features.service.user_user-a", func(r config.Rule) bool {
		return r.Mode == config.ModeShadow && len(r.Descriptor.Entries) == 2 && r.Descriptor.Entries[1].Value == "user-a"
	})
	check("features.path__api__", func(r config.Rule) bool {
		return r.Descriptor.Entries[0].Value == "/api/*" && r.Window.D() == time.Minute
	})
	check("specific_limit", func(r config.Rule) bool { return *r.Limit == 5 })
	check("features.key_2_value_2.user_bkthomps", func(r config.Rule) bool {
		return reflect.DeepEqual(r.Replaces, []string{"specific_limit"})
	})
	check("features.billing", func(r config.Rule) bool { return r.Window.D() == 30*24*time.Hour })
	check("features.yearly", func(r config.Rule) bool { return r.Window.D() == 365*24*time.Hour })
}

// Every bad file is refused with the message its first line names.
func TestBadFiles(t *testing.T) {
	files, _ := filepath.Glob("testdata/bad/*.yaml")
	if len(files) < 8 {
		t.Fatalf("only %d fixtures", len(files))
	}
	for _, f := range files {
		data := mustRead(t, f)
		first, _, _ := strings.Cut(string(data), "\n")
		want := strings.TrimPrefix(first, "# want: ")
		if _, _, err := envoyconf.Parse(f, data); err == nil || !strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), f+":") {
			t.Errorf("%s: %v, want an error naming the file and containing %q", f, err, want)
		}
	}
}

// A domain in two files is refused.
func TestDomainTwice(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a.yaml")
	b := filepath.Join(dir, "b.yaml")
	text := "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"
	for _, p := range []string{a, b} {
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := envoyconf.Load(a, b); err == nil || !strings.Contains(err.Error(), "also configured") {
		t.Fatalf("%v", err)
	}
}

// With merging (the peer's MERGE_DOMAIN_CONFIG) a domain spans files: their
// descriptors add up, and one descriptor in two files is an error that
// names both (issue 26).
func TestMergeDomains(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a := write("a.yaml", "domain: d\ndescriptors:\n  - key: k1\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	b := write("b.yaml", "domain: d\ndescriptors:\n  - key: k2\n    rate_limit: {unit: minute, requests_per_unit: 2}\n")
	c := write("c.yaml", "domain: d\ndescriptors:\n  - key: k1\n    rate_limit: {unit: hour, requests_per_unit: 3}\n")
	if _, err := envoyconf.Load(a, b); err == nil || !strings.Contains(err.Error(), "merge_domains") {
		t.Errorf("without merging: %v, want an error that names the setting", err)
	}
	rules, err := envoyconf.LoadMerging(true, a, b)
	if err != nil || len(rules) != 2 || rules[0].RuleID != "d.k1" || rules[1].RuleID != "d.k2" {
		t.Fatalf("merged: %v %+v", err, rules)
	}
	if _, err := envoyconf.LoadMerging(true, a, c); err == nil || !strings.Contains(err.Error(), "a.yaml") || !strings.Contains(err.Error(), "c.yaml") {
		t.Errorf("one descriptor in two merged files: %v, want an error naming both", err)
	}
}

// FuzzParse: any bytes give rules or an error, never a panic, and the
// rules Parse returns validate or are refused by WithRules.
func FuzzParse(f *testing.F) {
	for _, p := range []string{"testdata/good/basic.yaml", "testdata/good/features.yaml", "testdata/bad/duplicate.yaml"} {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	base, err := config.Parse("t.yaml", []byte("{}"))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		rules, _, err := envoyconf.Parse("fuzz.yaml", data)
		if err != nil {
			return
		}
		_, _ = base.WithRules(rules)
		_, _ = envoyconf.Marshal(rules)
	})
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func keys(m map[string]config.Rule) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// Two domains may name a limit alike, as the peer scopes names by domain
// (its compose example and a copy under another domain both name
// "fake_name"): the later file's rule is "domain.name", and its replaces
// follow the rename.
func TestNameInTwoDomains(t *testing.T) {
	dir := t.TempDir()
	text := func(domain string) string {
		return "domain: " + domain + `
descriptors:
  - {key: a, rate_limit: {name: per_user, unit: minute, requests_per_unit: 1}}
  - {key: b, rate_limit: {unit: minute, requests_per_unit: 2, replaces: [{name: per_user}]}}
`
	}
	var paths []string
	for _, d := range []string{"one", "two"} {
		p := filepath.Join(dir, d+".yaml")
		if err := os.WriteFile(p, []byte(text(d)), 0o600); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	rules, err := envoyconf.Load(paths...)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string][]string{}
	for _, r := range rules {
		ids[r.RuleID] = r.Replaces
	}
	if _, ok := ids["per_user"]; !ok {
		t.Errorf("the first domain's name is not its id: %v", ids)
	}
	if _, ok := ids["two.per_user"]; !ok {
		t.Errorf("the second domain's per_user is not two.per_user: %v", ids)
	}
	if got := ids["two.b"]; len(got) != 1 || got[0] != "two.per_user" {
		t.Errorf("two.b replaces %v, want [two.per_user]", got)
	}
	if got := ids["one.b"]; len(got) != 1 || got[0] != "per_user" {
		t.Errorf("one.b replaces %v, want [per_user]", got)
	}
}

// An error in a descriptor names the file and the descriptor's line, so a
// bad file in a runtime folder is found at once.
func TestErrorsNameTheLine(t *testing.T) {
	text := `domain: d
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 1}
    descriptors:
      - key: b
        rate_limit: {unit: minute, requests_per_unit: 1}
  - key: c
    rate_limit: {unit: minutes, requests_per_unit: 1}
`
	_, _, err := envoyconf.Parse("b.yaml", []byte(text))
	if err == nil || !strings.Contains(err.Error(), "b.yaml:8: d.c: rate_limit.unit") {
		t.Fatalf("%v, want the error at b.yaml:8", err)
	}
}
