// Package logfmttest writes access log lines in every format logfmt
// reads, from entries it makes up: the project's own test corpus (no
// third-party logs are committed).
package logfmttest

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"time"

	"github.com/sluicehq/sluice/replay/logfmt"
)

// Formats are the names Line writes, as `sluice replay -format` takes
// them.
var Formats = []string{"nginx", "clf", "nginx-json", "envoy", "envoy-json", "alb", "sluice"}

// Carries reports which fields a format's lines hold: the user (nginx's
// $remote_user, the JSON logs' user), the API key (JSON logs), the
// upstream's time (all but clf).
func Carries(format string) (user, apiKey, upstream bool) {
	switch format {
	case "nginx":
		return true, false, true
	case "clf":
		return true, false, false
	case "nginx-json", "sluice":
		return true, true, true
	case "envoy", "envoy-json", "alb":
		return false, false, true
	}
	return false, false, false
}

// Line writes e as one line of format (no newline). Times are written to
// the millisecond (nginx's and CLF's to the second), the upstream's time
// to the millisecond.
func Line(format string, e logfmt.Entry) string {
	ip := e.ClientIP.String()
	user := orDash(e.User)
	ms := e.Upstream.Milliseconds()
	secs := fmt.Sprintf("%d.%03d", ms/1000, ms%1000)
	local := e.Time.Format("02/Jan/2006:15:04:05 -0700")
	iso := e.Time.UTC().Format("2006-01-02T15:04:05.000Z")
	switch format {
	case "nginx":
		return fmt.Sprintf(`%s - %s [%s] "%s %s?q=1 HTTP/1.1" %d 512 "-" "curl/8.0 (x; y)" 0.%03d %s`, ip, user, local, e.Method, e.Path, e.Status, ms%1000, secs)
	case "clf":
		return fmt.Sprintf(`%s - %s [%s] "%s %s HTTP/1.0" %d 512`, ip, user, local, e.Method, e.Path, e.Status)
	case "nginx-json":
		return fmt.Sprintf(`{"time_local":%q,"remote_addr":%q,"remote_user":%q,"request":"%s %s HTTP/1.1","status":"%d","body_bytes_sent":"12","upstream_response_time":%q,"request_time":"9.999","http_x_api_key":%q}`,
			local, ip, e.User, e.Method, e.Path, e.Status, secs, e.APIKey)
	case "sluice":
		return fmt.Sprintf(`{"time":%q,"client_ip":%q,"user":%q,"api_key":%q,"method":%q,"path":%q,"status":%d,"upstream_ms":%d}`,
			e.Time.UTC().Format(time.RFC3339Nano), ip, e.User, e.APIKey, e.Method, e.Path, e.Status, ms)
	case "envoy":
		return fmt.Sprintf(`[%s] "%s %s HTTP/1.1" %d - via_upstream - "-" 0 12 %d %d "%s" "curl/8.0" "id-1" "svc" "10.0.0.9:8080" outbound|8080||svc 10.0.0.5:41000 10.0.0.5:8080 %s:5555 - default`,
			iso, e.Method, e.Path, e.Status, ms+1, ms, ip, ip)
	case "envoy-json":
		return fmt.Sprintf(`{"start_time":%q,"method":%q,"path":%q,"protocol":"HTTP/1.1","response_code":%d,"duration":%d,"upstream_service_time":"%d","x_forwarded_for":%q,"downstream_remote_address":"%s:5555"}`,
			iso, e.Method, e.Path, e.Status, ms+1, ms, ip, ip)
	case "alb":
		return fmt.Sprintf(`https %s app/lb/50dc6c495c0c9188 %s:2817 10.0.0.1:80 0.000 %s 0.000 %d %d 34 366 "%s https://svc.example.com:443%s?x=1 HTTP/1.1" "curl/8.0" ECDHE-RSA-AES128-GCM-SHA256 TLSv1.2 arn:aws:elasticloadbalancing:us-east-2:1:targetgroup/t/1 "Root=1-58337262" "svc.example.com" "arn:aws:acm:1" 0 %s "forward" "-" "-" "10.0.0.1:80" "%d" "-" "-"`,
			e.Time.UTC().Format("2006-01-02T15:04:05.000000Z"), ip, secs, e.Status, e.Status, e.Method, e.Path, iso, e.Status)
	}
	panic("logfmttest: unknown format " + format)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// Malformed are lines no format reads as a request, each with why.
var Malformed = []string{
	`not a log line at all`,
	`192.0.2.1 - - [10/Oct/2000:13:55:36 -0700] "\x16\x03\x01\x02\x00\x01" 400 0 "-" "-"`,
	`192.0.2.1 - - [31/Foo/2000:13:55:36 -0700] "GET / HTTP/1.1" 200 1 "-" "-"`,
	`192.0.2.1 - - [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.1" abc 1 "-" "-"`,
	`{"time":"yesterday","method":"GET","path":"/"}`,
	`{"time":"2026-01-01T00:00:00Z","method":"GET","path":"/","status":`,
	`[2026-01-01T00:00:00.000Z] "GET /x HTTP/1.1"`,
	`https 2026-01-01T00:00:00.000000Z app/lb/1 nothere`,
}

// Traffic makes n entries from seed, in time order from start at about
// rate a second: clients clients (addresses, users, API keys), a few
// heavy; paths under /api; statuses mostly 200; upstream times 1-50 ms.
func Traffic(seed uint64, n int, start time.Time, rate float64, clients int) []logfmt.Entry {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	out := make([]logfmt.Entry, 0, n)
	t := start
	paths := []string{"/api/orders", "/api/orders/42", "/api/search", "/login", "/static/app.js"}
	methods := []string{"GET", "GET", "GET", "POST", "PUT"}
	for range n {
		t = t.Add(time.Duration(r.ExpFloat64() / rate * float64(time.Second)))
		c := r.IntN(clients)
		if r.IntN(4) == 0 {
			c = r.IntN(max(1, clients/20)) // the heavy few
		}
		e := logfmt.Entry{
			Time:     t.Truncate(time.Millisecond),
			Method:   methods[r.IntN(len(methods))],
			Path:     paths[r.IntN(len(paths))],
			ClientIP: netip.AddrFrom4([4]byte{198, 51, byte(c >> 8), byte(c)}),
			User:     fmt.Sprintf("user-%d", c),
			APIKey:   fmt.Sprintf("key-%d", c%(max(1, clients/4))),
			Status:   200,
			Upstream: time.Duration(1+r.IntN(50)) * time.Millisecond, HasUpstream: true,
		}
		if r.IntN(20) == 0 {
			e.Status = 404
		}
		out = append(out, e)
	}
	return out
}

// Log writes entries as a whole log of format, with a malformed line
// every every lines (0: none); it reports the malformed lines' numbers
// (1-based).
func Log(format string, entries []logfmt.Entry, every int) (string, []int) {
	var b strings.Builder
	var bad []int
	line := 0
	for i, e := range entries {
		if every > 0 && i > 0 && i%every == 0 {
			line++
			b.WriteString(Malformed[(i/every)%len(Malformed)])
			b.WriteByte('\n')
			bad = append(bad, line)
		}
		line++
		b.WriteString(Line(format, e))
		b.WriteByte('\n')
	}
	return b.String(), bad
}
