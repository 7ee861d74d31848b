package main_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// configMapDir lays out dir as the kubelet lays out a mounted ConfigMap:
// the data in a timestamped folder, "..data" a symlink to it, and each key
// a symlink through "..data". swap writes a new version the kubelet's way:
// a new folder, a new symlink renamed over "..data", the old folder gone.
type configMapDir struct {
	t       testing.TB
	dir     string
	version int
	current string
}

func (c *configMapDir) write(files map[string]string) {
	c.t.Helper()
	c.version++
	ts := filepath.Join(c.dir, "..2026_11_23_00_00_0"+string(rune('0'+c.version))+".000000001")
	if err := os.Mkdir(ts, 0o755); err != nil {
		c.t.Fatal(err)
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(ts, name), []byte(text), 0o644); err != nil {
			c.t.Fatal(err)
		}
	}
	tmp := filepath.Join(c.dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		c.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(c.dir, "..data")); err != nil { // atomic swap
		c.t.Fatal(err)
	}
	for name := range files {
		link := filepath.Join(c.dir, name)
		if _, err := os.Lstat(link); os.IsNotExist(err) {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				c.t.Fatal(err)
			}
		}
	}
	if c.current != "" {
		os.RemoveAll(c.current)
	}
	c.current = ts
}

// A ConfigMap update, replayed on disk as the kubelet performs it (the
// "..data" symlink swapped, the old folder removed), reaches the running
// sidecar: the new rules apply, the old file's removal is not an error.
func TestE2EConfigMapSymlinkSwap(t *testing.T) {
	up := upstreamServer(t)
	cm := &configMapDir{t: t, dir: t.TempDir()}
	cm.write(map[string]string{"sluice.yaml": "adaptive: {algorithm: off}\nrules:\n" +
		"  - {rule_id: first, identifier_type: global, algorithm: token_bucket, limit: 100, window: 1s}\n"})
	s := startFile(t, up.URL, filepath.Join(cm.dir, "sluice.yaml"))
	ids := func() []string {
		var out []string
		for _, r := range state(t, s).Rules {
			out = append(out, r.RuleID)
		}
		return out
	}
	if got := ids(); !slices.Equal(got, []string{"first"}) {
		t.Fatalf("rules at start %v", got)
	}
	cm.write(map[string]string{"sluice.yaml": "adaptive: {algorithm: off}\nrules:\n" +
		"  - {rule_id: first, identifier_type: global, algorithm: token_bucket, limit: 100, window: 1s}\n" +
		"  - {rule_id: second, identifier_type: ip_address, algorithm: gcra, limit: 1, window: 1h}\n"})
	waitFor(t, func() bool { return slices.Equal(ids(), []string{"first", "second"}) })
	// The new rule is enforced.
	get(t, "http://"+s.proxy+"/")
	if resp, _ := get(t, "http://"+s.proxy+"/"); resp.StatusCode != 429 {
		t.Fatalf("second request under rule second: %d, want 429", resp.StatusCode)
	}
	// And a second swap is seen too (the watch survived the first).
	cm.write(map[string]string{"sluice.yaml": "adaptive: {algorithm: off}\nrules:\n" +
		"  - {rule_id: third, identifier_type: global, algorithm: token_bucket, limit: 100, window: 1s}\n"})
	waitFor(t, func() bool { return slices.Equal(ids(), []string{"third"}) })
}
