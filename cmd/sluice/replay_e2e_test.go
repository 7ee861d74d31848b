package main_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/replay"
	"github.com/sluicehq/sluice/replay/logfmt/logfmttest"
)

const replayRules = `rules:
  - {rule_id: per_ip, identifier_type: ip_address, algorithm: fixed_window, limit: 10, window: 1m}
  - {rule_id: login, identifier_type: ip_address, algorithm: token_bucket, limit: 3, window: 1m, match: {path_pattern: /login}}
`

// sluice replay through the binary: every format (one gzip-compressed,
// one on standard input) gives the same answer, unknown lines are
// counted, -out writes a report that renders in headless Chromium and a
// suggested configuration that sluice check accepts, and bad flags are
// refused with a message.
func TestE2EReplay(t *testing.T) {
	dir := t.TempDir()
	rules := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rules, []byte(replayRules), 0o600); err != nil {
		t.Fatal(err)
	}
	entries := logfmttest.Traffic(21, 4000, time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC), 40, 30)
	for i := range entries {
		entries[i].Time = entries[i].Time.Truncate(time.Second) // what every format keeps
	}
	var want *replay.Result
	for i, format := range logfmttest.Formats {
		log, bad := logfmttest.Log(format, entries, 1000)
		path := filepath.Join(dir, format+".log")
		data := []byte(log)
		if i == 1 {
			var gz bytes.Buffer
			w := gzip.NewWriter(&gz)
			w.Write(data)
			w.Close()
			path, data = path+".gz", gz.Bytes()
		}
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		args := []string{"replay", "-config", rules, "-json", path}
		cmd := exec.Command(binary, args...)
		if i == 2 {
			cmd = exec.Command(binary, "replay", "-config", rules, "-json", "-format", format)
			cmd.Stdin = strings.NewReader(log)
		}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: %v", format, err)
		}
		var res []*replay.Result
		if err := json.Unmarshal(out, &res); err != nil {
			t.Fatalf("%s: %v: %s", format, err, out)
		}
		r := res[0]
		if r.Requests != int64(len(entries)) || r.Unknown != int64(len(bad)) || len(r.Rules) != 2 {
			t.Fatalf("%s: %d requests, %d unknown, %d rules; want %d, %d, 2", format, r.Requests, r.Unknown, len(r.Rules), len(entries), len(bad))
		}
		if want == nil {
			want = r
			if r.Rules[0].Limited == 0 || r.Rules[1].Limited == 0 {
				t.Fatalf("nothing limited: %+v", r.Rules)
			}
			continue
		}
		for j := range r.Rules {
			if g, w := r.Rules[j], want.Rules[j]; g.Limited != w.Limited || g.LimitedKeys != w.LimitedKeys {
				t.Errorf("%s: rule %s limited %d (%d keys), nginx's log %d (%d keys)", format, g.RuleID, g.Limited, g.LimitedKeys, w.Limited, w.LimitedKeys)
			}
		}
	}

	// The terminal summary, the report and the suggestions.
	out := filepath.Join(dir, "report")
	text, err := exec.Command(binary, "replay", "-config", rules, "-compare", rules, "-out", out, filepath.Join(dir, "nginx.log")).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	for _, s := range []string{"per_ip", "login", "unknown lines", "compared", "report.html"} {
		if !bytes.Contains(text, []byte(s)) {
			t.Errorf("summary lacks %q:\n%s", s, text)
		}
	}
	for _, f := range []string{"report.html", "limited.png", "closeness.png", "replay.json", "suggested.yaml"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
	if msg, err := exec.Command(binary, "check", "-config", filepath.Join(out, "suggested.yaml")).CombinedOutput(); err != nil {
		t.Errorf("sluice check refuses the suggestions: %v\n%s", err, msg)
	}
	dom := chromium(t, "file://"+filepath.Join(out, "report.html"), 500, "")
	for _, s := range []string{"Top keys: per_ip", "Requests limited per minute", "<svg"} {
		if !strings.Contains(dom, s) {
			t.Errorf("the rendered report lacks %q", s)
		}
	}
	chromium(t, "file://"+filepath.Join(out, "report.html"), 500, filepath.Join(out, "report.png"))
	if st, err := os.Stat(filepath.Join(out, "report.png")); err != nil || st.Size() < 10_000 {
		t.Errorf("screenshot: %v", err)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"replay"}, "-config FILE is required"},
		{[]string{"replay", "-config", rules, "-format", "apache2"}, "apache2"},
		{[]string{"replay", "-config", rules, "-map", "colour=c"}, "unknown field"},
		{[]string{"replay", "-config", rules, "-service-model", "many"}, "many"},
		{[]string{"replay", "-config", rules, "-service-model", "auto", "-"}, "standard input"},
		{[]string{"replay", "-config", rules, filepath.Join(dir, "missing.log")}, "missing.log"},
	} {
		msg, err := exec.Command(binary, c.args...).CombinedOutput()
		if err == nil || !strings.Contains(string(msg), c.want) {
			t.Errorf("%v: %v %s; want an error naming %q", c.args, err, msg, c.want)
		}
	}
}

// The same requests sent live through sluice run and replayed from their
// log get the same answers, request by request.
func TestE2EReplayAgreesWithLive(t *testing.T) {
	const rules = `
adaptive: {algorithm: off}
rules:
  - {rule_id: per_user, identifier_type: user_id, algorithm: fixed_window, limit: 6, window: 1h}
  - {rule_id: per_key, identifier_type: api_key, algorithm: token_bucket, limit: 10, window: 1h, burst: 4}
  - {rule_id: writes, identifier_type: global, algorithm: sliding_window, limit: 25, window: 1h, match: {methods: [POST]}}
  - {rule_id: search, identifier_type: user_id, algorithm: sliding_log, limit: 3, window: 1h, match: {path_pattern: /search}}
`
	up := upstreamServer(t)
	s := start(t, up.URL, rules)
	var log strings.Builder
	live := map[int]int{}
	client := &http.Client{}
	for i := range 300 {
		user, key := fmt.Sprintf("u%d", i%13), fmt.Sprintf("k%d", i%5)
		method, path := "GET", "/orders"
		if i%4 == 0 {
			method = "POST"
		}
		if i%7 == 0 {
			path = "/search"
		}
		req, _ := http.NewRequest(method, "http://"+s.proxy+path, nil)
		req.Header.Set("X-User-ID", user)
		req.Header.Set("X-API-Key", key)
		at := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		live[i+1] = resp.StatusCode
		fmt.Fprintf(&log, `{"time":%q,"client_ip":"127.0.0.1","user":%q,"api_key":%q,"method":%q,"path":%q,"status":%d,"upstream_ms":0}`+"\n",
			at.UTC().Format(time.RFC3339Nano), user, key, method, path, resp.StatusCode)
	}
	dir := t.TempDir()
	cfg, logPath, decPath := filepath.Join(dir, "rules.yaml"), filepath.Join(dir, "access.log"), filepath.Join(dir, "decisions")
	os.WriteFile(cfg, []byte(rules), 0o600)
	os.WriteFile(logPath, []byte(log.String()), 0o600)
	if out, err := exec.Command(binary, "replay", "-config", cfg, "-decisions", decPath, logPath).CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	dec, _ := os.ReadFile(decPath)
	replayed := map[int]int{}
	for _, l := range strings.Split(strings.TrimSpace(string(dec)), "\n") {
		var line, status int
		var rule string
		if _, err := fmt.Sscanf(l[strings.LastIndex(l[:strings.Index(l, " ")], ":")+1:], "%d %d %s", &line, &status, &rule); err != nil {
			t.Fatalf("decision %q: %v", l, err)
		}
		replayed[line] = status
	}
	refused := 0
	for i := 1; i <= 300; i++ {
		if live[i] != replayed[i] {
			t.Errorf("request %d: live %d, replayed %d", i, live[i], replayed[i])
		}
		if live[i] == 429 {
			refused++
		}
	}
	if refused < 50 {
		t.Errorf("only %d of 300 refused live: the rules should bite", refused)
	}
}
