package logfmt_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/replay/logfmt"
	"github.com/sluicehq/sluice/replay/logfmt/logfmttest"
)

var formatOf = map[string]logfmt.Format{
	"nginx": logfmt.Combined, "clf": logfmt.Combined, "nginx-json": logfmt.JSON, "sluice": logfmt.JSON,
	"envoy": logfmt.Envoy, "envoy-json": logfmt.JSON, "alb": logfmt.ALB,
}

// Every format's lines read back as the entries they were written from,
// detected as their format, with the fields the format carries, by one
// parser, as a replay reads a log (the lines of a second share its time,
// which the parser keeps).
func TestRoundTrip(t *testing.T) {
	entries := logfmttest.Traffic(1, 300, time.Date(2026, 3, 1, 12, 0, 0, 0, time.FixedZone("", -7*3600)), 50, 40)
	for _, name := range logfmttest.Formats {
		t.Run(name, func(t *testing.T) {
			user, key, upstream := logfmttest.Carries(name)
			p, err := logfmt.NewParser(formatOf[name], nil)
			if err != nil {
				t.Fatal(err)
			}
			for i, want := range entries {
				line := logfmttest.Line(name, want)
				if f := logfmt.Detect([]byte(line)); f != formatOf[name] {
					t.Fatalf("line %d detected as %v, want %v: %s", i, f, formatOf[name], line)
				}
				var got logfmt.Entry
				if err := p.Parse([]byte(line), &got); err != nil {
					t.Fatalf("line %d: %v: %s", i, err, line)
				}
				prec := time.Millisecond
				if name == "nginx" || name == "clf" || name == "nginx-json" {
					prec = time.Second
				}
				if !got.Time.Equal(want.Time.Truncate(prec)) || got.Method != want.Method || got.Path != want.Path ||
					got.ClientIP != want.ClientIP || got.Status != want.Status {
					t.Fatalf("line %d: got %+v\n\twant %+v\n\tfrom %s", i, got, want, line)
				}
				if user && got.User != want.User || key && got.APIKey != want.APIKey {
					t.Fatalf("line %d: user %q key %q, want %q %q", i, got.User, got.APIKey, want.User, want.APIKey)
				}
				if upstream && (!got.HasUpstream || got.Upstream != want.Upstream) {
					t.Fatalf("line %d: upstream %v (%v), want %v", i, got.Upstream, got.HasUpstream, want.Upstream)
				}
			}
		})
	}
}

// Malformed lines are errors, in whichever format they are read.
func TestMalformed(t *testing.T) {
	for _, line := range logfmttest.Malformed {
		for _, f := range []logfmt.Format{logfmt.Detect([]byte(line)), logfmt.Combined, logfmt.JSON, logfmt.Envoy, logfmt.ALB} {
			if f == logfmt.Auto {
				continue
			}
			p, _ := logfmt.NewParser(f, nil)
			var e logfmt.Entry
			if err := p.Parse([]byte(line), &e); err == nil {
				t.Errorf("%v read %q as %+v", f, line, e)
			}
		}
	}
}

// A mapping names the keys of a custom JSON log, request headers too; a
// mapping of an unknown field, or for a text format, is refused.
func TestMapping(t *testing.T) {
	m, err := logfmt.ParseMapping([]string{"client_ip=ip", "time=ts", "path=route", "method=verb", "upstream_ms=took", "header:x-tenant=tenant", "api_key=k"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := logfmt.NewParser(logfmt.JSON, m)
	if err != nil {
		t.Fatal(err)
	}
	var e logfmt.Entry
	line := `{"ts":1767225600.250,"ip":"2001:db8::1","verb":"DELETE","route":"/v1/x?y","took":12.5,"tenant":"acme","k":"secret","path":"/ignored"}`
	if err := p.Parse([]byte(line), &e); err != nil {
		t.Fatal(err)
	}
	if e.Time.UnixMilli() != 1767225600250 || e.ClientIP.String() != "2001:db8::1" || e.Method != "DELETE" || e.Path != "/v1/x" ||
		e.Upstream != 12500*time.Microsecond || e.APIKey != "secret" || len(e.Headers) != 1 || e.Headers[0] != [2]string{"X-Tenant", "acme"} {
		t.Errorf("got %+v", e)
	}
	for _, bad := range [][]string{{"colour=c"}, {"time"}, {"time=a", "user=a"}} {
		if m, err := logfmt.ParseMapping(bad); err == nil {
			if _, err := logfmt.NewParser(logfmt.JSON, m); err == nil {
				t.Errorf("mapping %v accepted", bad)
			}
		}
	}
	if _, err := logfmt.NewParser(logfmt.Combined, logfmt.Mapping{"user": "u"}); err == nil || !strings.Contains(err.Error(), "JSON") {
		t.Errorf("a mapping for nginx lines: %v", err)
	}
}

func TestParseAllocatesNothing(t *testing.T) {
	e := logfmttest.Traffic(2, 1, time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC), 1, 1)[0]
	for _, name := range []string{"nginx", "envoy", "alb"} {
		line := []byte(logfmttest.Line(name, e))
		p, _ := logfmt.NewParser(formatOf[name], nil)
		var got logfmt.Entry
		if n := testing.AllocsPerRun(100, func() { _ = p.Parse(line, &got) }); n != 0 {
			t.Errorf("%s: %v allocations per line", name, n)
		}
	}
}

func FuzzParse(f *testing.F) {
	e := logfmttest.Traffic(3, 1, time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC), 1, 1)[0]
	for _, name := range logfmttest.Formats {
		f.Add(logfmttest.Line(name, e))
	}
	for _, l := range logfmttest.Malformed {
		f.Add(l)
	}
	f.Fuzz(func(t *testing.T, line string) {
		for _, fm := range []logfmt.Format{logfmt.Combined, logfmt.JSON, logfmt.Envoy, logfmt.ALB} {
			p, _ := logfmt.NewParser(fm, nil)
			var e logfmt.Entry
			if err := p.Parse([]byte(line), &e); err == nil && (e.Method == "" || !strings.HasPrefix(e.Path, "/") && e.Path != "*") {
				t.Fatalf("%v read %q as %+v", fm, line, e)
			}
		}
		_ = logfmt.Detect([]byte(line))
	})
}

func BenchmarkParse(b *testing.B) {
	e := logfmttest.Traffic(4, 1, time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC), 1, 1)[0]
	for _, name := range logfmttest.Formats {
		line := []byte(logfmttest.Line(name, e))
		p, _ := logfmt.NewParser(formatOf[name], nil)
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(line)))
			var got logfmt.Entry
			for b.Loop() {
				if err := p.Parse(line, &got); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
