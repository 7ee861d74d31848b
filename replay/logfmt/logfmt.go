// Package logfmt reads the access logs users already have, one line at a
// time, into Entries: nginx's combined format and Apache's Common Log
// Format, JSON lines (nginx's escape=json log_format, Envoy's json_format,
// sluice's access log, or any with a field mapping), Envoy's default text
// format and AWS Application Load Balancer logs. A line that is not what
// its format says is an error naming why, never a panic; Parse allocates
// nothing for the text formats.
package logfmt

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// Format is an access log's format.
type Format uint8

// The formats.
const (
	// Auto detects the format from a line (Detect).
	Auto Format = iota
	// Combined is nginx's and Apache's combined format, and the Common
	// Log Format it extends; trailing fields (request and upstream times)
	// are read when present.
	Combined
	// JSON is one JSON object per line: nginx's escape=json log_format,
	// Envoy's json_format, sluice's access log, or any with a mapping.
	JSON
	// Envoy is Envoy's default text format.
	Envoy
	// ALB is an AWS Application Load Balancer access log.
	ALB
)

var formatNames = map[string]Format{
	"auto": Auto, "nginx": Combined, "combined": Combined, "clf": Combined,
	"nginx-json": JSON, "envoy-json": JSON, "json": JSON, "sluice": JSON, "envoy": Envoy, "alb": ALB,
}

// ParseFormat reads a format's name as the CLI takes it.
func ParseFormat(s string) (Format, error) {
	f, ok := formatNames[s]
	if !ok {
		return Auto, fmt.Errorf("format %q: want auto, nginx, clf, nginx-json, envoy, envoy-json, alb or sluice", s)
	}
	return f, nil
}

// String names f.
func (f Format) String() string {
	return [...]string{"auto", "nginx", "json", "envoy", "alb"}[f]
}

// Entry is one request as a log line tells it. Its strings point into the
// line: they are valid until the next Parse with the same Parser.
type Entry struct {
	Time     time.Time
	Method   string
	Path     string // the path, without the query
	ClientIP netip.Addr
	User     string
	APIKey   string
	// Headers are the request headers the mapping names (header:<Name>),
	// as name, value pairs.
	Headers [][2]string
	Status  int
	// Upstream is the upstream's time; HasUpstream says the line had it.
	Upstream    time.Duration
	HasUpstream bool
}

// ErrSkip is Parse's error for a line that is not a request (empty).
var ErrSkip = errors.New("not a request")

// Parser parses lines of one format.
type Parser struct {
	format Format
	json   *jsonFields
	zone   zoneCache
}

// NewParser returns a parser for f (not Auto: Detect first) with the
// field mapping m (JSON only: field name -> key; see Mapping).
func NewParser(f Format, m Mapping) (*Parser, error) {
	p := &Parser{format: f}
	switch f {
	case Auto:
		return nil, errors.New("logfmt: detect the format first")
	case JSON:
		jf, err := newJSONFields(m)
		if err != nil {
			return nil, err
		}
		p.json = jf
	default:
		if len(m) > 0 {
			return nil, fmt.Errorf("-map applies to JSON logs; %s lines have fixed fields", f)
		}
	}
	return p, nil
}

// Format is the parser's format.
func (p *Parser) Format() Format { return p.format }

// Parse reads line into e. An empty line is ErrSkip; a line that is not a
// request of the format an error.
func (p *Parser) Parse(line []byte, e *Entry) error {
	*e = Entry{Headers: e.Headers[:0]}
	s := strings.TrimSpace(unsafeString(line))
	if s == "" {
		return ErrSkip
	}
	switch p.format {
	case Combined:
		return p.combined(s, e)
	case JSON:
		return p.json.parse(s, e, &p.zone)
	case Envoy:
		return p.envoy(s, e)
	case ALB:
		return p.alb(s, e)
	}
	return errors.New("logfmt: unknown format")
}

// Detect guesses the format of line.
func Detect(line []byte) Format {
	s := strings.TrimSpace(string(line))
	switch {
	case s == "":
		return Auto
	case s[0] == '{':
		return JSON
	case s[0] == '[' && len(s) > 11 && s[5] == '-' && s[8] == '-':
		return Envoy
	}
	if i := strings.IndexByte(s, ' '); i > 0 {
		switch s[:i] {
		case "http", "https", "h2", "grpcs", "ws", "wss":
			return ALB
		}
	}
	return Combined
}

// combined reads `ip ident user [time] "method target proto" status bytes
// ["referer" "agent"] [request_time upstream_time | key=value ...]`.
func (p *Parser) combined(s string, e *Entry) error {
	ip, rest, ok := strings.Cut(s, " ")
	if !ok {
		return errors.New("no fields")
	}
	if err := setIP(e, ip); err != nil {
		return err
	}
	_, rest, _ = strings.Cut(rest, " ") // ident
	user, rest, _ := strings.Cut(rest, " ")
	if user != "-" {
		e.User = user
	}
	if !strings.HasPrefix(rest, "[") {
		return errors.New("no [time]")
	}
	ts, rest, ok := strings.Cut(rest[1:], "] ")
	if !ok {
		return errors.New("no [time]")
	}
	t, err := p.zone.parseLocal(ts)
	if err != nil {
		return err
	}
	e.Time = t
	if rest, err = quotedRequest(e, rest); err != nil {
		return err
	}
	status, rest, _ := strings.Cut(strings.TrimLeft(rest, " "), " ")
	if e.Status, err = atoi(status); err != nil {
		return fmt.Errorf("status %q", status)
	}
	_, rest, _ = strings.Cut(rest, " ") // bytes
	// "referer" "agent", then what a custom log_format adds.
	for range 2 {
		rest = strings.TrimLeft(rest, " ")
		if !strings.HasPrefix(rest, `"`) {
			break
		}
		if _, rest, err = quoted(rest); err != nil {
			return err
		}
	}
	return trailingTimes(e, rest)
}

// trailingTimes reads what a custom log_format adds after the combined
// fields: `urt=0.012` (or upstream_response_time=, upstream_time=), else
// the last bare number, nginx's usual `$request_time
// $upstream_response_time` order (seconds; "0.010, 0.020" for retries
// sums them).
func trailingTimes(e *Entry, rest string) error {
	var last string
	for rest != "" {
		var f string
		f, rest, _ = strings.Cut(strings.TrimLeft(rest, " "), " ")
		if k, v, ok := strings.Cut(f, "="); ok {
			switch k {
			case "urt", "upstream_response_time", "upstream_time":
				return setSeconds(e, strings.Trim(v, `"`))
			}
			continue
		}
		if f != "" && (f[0] >= '0' && f[0] <= '9' || f == "-") {
			last = f
		}
	}
	if last != "" && last != "-" {
		return setSeconds(e, strings.TrimSuffix(last, ","))
	}
	return nil
}

// envoy reads Envoy's default format: `[time] "method path proto" status
// flags ... duration upstream_service_time "xff" "agent" "id" "authority"
// "upstream" [cluster local_upstream local downstream ...]`.
func (p *Parser) envoy(s string, e *Entry) error {
	if !strings.HasPrefix(s, "[") {
		return errors.New("no [time]")
	}
	ts, rest, ok := strings.Cut(s[1:], "] ")
	if !ok {
		return errors.New("no [time]")
	}
	t, err := parseISO(ts)
	if err != nil {
		return err
	}
	e.Time = t
	if rest, err = quotedRequest(e, rest); err != nil {
		return err
	}
	// The fields after the request, quoted or not. X-Forwarded-For opens
	// the first run of five quoted ones (then the agent, the request id,
	// the authority, the upstream host); the two before it are the
	// duration and the upstream's time (ms, "-" when none).
	var f [24]string
	var q [24]bool
	n := 0
	for rest = strings.TrimLeft(rest, " "); rest != "" && n < len(f); rest = strings.TrimLeft(rest, " ") {
		if rest[0] == '"' {
			if f[n], rest, err = quoted(rest); err != nil {
				return err
			}
			q[n] = true
		} else {
			f[n], rest, _ = strings.Cut(rest, " ")
		}
		n++
	}
	run := -1
	for i := 2; i+5 <= n; i++ {
		if q[i] && q[i+1] && q[i+2] && q[i+3] && q[i+4] && !q[i-1] && !q[i-2] {
			run = i
			break
		}
	}
	if run < 0 || q[0] {
		return errors.New("want status ... duration upstream_time \"x-forwarded-for\" \"agent\" \"id\" \"authority\" \"upstream\"")
	}
	if e.Status, err = atoi(f[0]); err != nil {
		return fmt.Errorf("status %q", f[0])
	}
	if up := f[run-1]; up != "-" {
		if err := setMillis(e, up); err != nil {
			return err
		}
	}
	if xff := f[run]; xff != "-" && xff != "" {
		first, _, _ := strings.Cut(xff, ",")
		return setIP(e, strings.TrimSpace(first))
	}
	// No X-Forwarded-For: the downstream remote address, the fourth field
	// after the quoted run, when the format has it.
	if i := run + 5 + 3; i < n && !q[i] {
		return setIP(e, f[i])
	}
	return nil
}

// alb reads an ALB log line: `type time elb client:port target:port
// request_time target_time response_time elb_status target_status
// received sent "method url proto" ...`.
func (p *Parser) alb(s string, e *Entry) error {
	var f [12]string
	rest := s
	for i := range f {
		var ok bool
		f[i], rest, ok = strings.Cut(rest, " ")
		if !ok {
			return errors.New("too few fields")
		}
	}
	t, err := parseISO(f[1])
	if err != nil {
		return err
	}
	e.Time = t
	if err := setIP(e, f[3]); err != nil {
		return err
	}
	if f[6] != "-1" {
		if err := setSeconds(e, f[6]); err != nil {
			return err
		}
	}
	status := f[9]
	if status == "-" {
		status = f[8] // no answer from a target: the load balancer's
	}
	if e.Status, err = atoi(status); err != nil {
		return fmt.Errorf("status %q", status)
	}
	req, _, err := quoted(rest)
	if err != nil {
		return fmt.Errorf("request: %w", err)
	}
	return setRequest(e, req)
}

// quoted reads a double-quoted field at s's start (backslash escapes
// kept), returning it and what follows.
func quoted(s string) (string, string, error) {
	if !strings.HasPrefix(s, `"`) {
		return "", s, errors.New("want a quoted field")
	}
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			return s[1:i], s[i+1:], nil
		}
	}
	return "", s, errors.New("unterminated quoted field")
}

// quotedRequest reads the quoted request line at rest's start into e and
// returns what follows it.
func quotedRequest(e *Entry, rest string) (string, error) {
	req, rest, err := quoted(rest)
	if err != nil {
		return rest, fmt.Errorf("request: %w", err)
	}
	return rest, setRequest(e, req)
}

// setRequest reads "METHOD target PROTO" (an absolute URL's path too).
func setRequest(e *Entry, req string) error {
	method, rest, ok := strings.Cut(req, " ")
	if !ok || method == "" || method == "-" {
		return fmt.Errorf("request %q: want METHOD target", req)
	}
	for i := 0; i < len(method); i++ {
		if c := method[i]; c < 'A' || c > 'Z' {
			return fmt.Errorf("method %q", method)
		}
	}
	target, _, _ := strings.Cut(rest, " ")
	return setTarget(e, method, target)
}

// setTarget sets the method and the path of target (origin or absolute
// form; the query dropped).
func setTarget(e *Entry, method, target string) error {
	if i := strings.Index(target, "://"); i > 0 {
		target = target[i+3:]
		if j := strings.IndexByte(target, '/'); j >= 0 {
			target = target[j:]
		} else {
			target = "/"
		}
	}
	if !strings.HasPrefix(target, "/") && target != "*" {
		return fmt.Errorf("target %q: want a path", target)
	}
	if i := strings.IndexByte(target, '?'); i >= 0 {
		target = target[:i]
	}
	e.Method, e.Path = method, target
	return nil
}

// setIP reads an address, with a port or not.
func setIP(e *Entry, s string) error {
	if i := strings.IndexByte(s, ':'); s != "" && (s[0] == '[' || i > 0 && strings.LastIndexByte(s, ':') == i) {
		// "192.0.2.1:80" or "[2001:db8::1]:80"
		if ap, err := netip.ParseAddrPort(s); err == nil {
			e.ClientIP = ap.Addr()
			return nil
		}
	}
	if a, err := netip.ParseAddr(s); err == nil {
		e.ClientIP = a
		return nil
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		e.ClientIP = ap.Addr()
		return nil
	}
	return fmt.Errorf("client address %q", s)
}

// setSeconds reads a time in seconds ("0.012"; "0.010, 0.020" summed).
func setSeconds(e *Entry, s string) error {
	var total time.Duration
	for rest := s; rest != ""; {
		var part string
		part, rest, _ = strings.Cut(rest, ",")
		part = strings.TrimSpace(part)
		if part == "-" || part == "" {
			continue
		}
		d, ok := decimal(part, time.Second)
		if !ok {
			return fmt.Errorf("time %q: want seconds", s)
		}
		total += d
	}
	e.Upstream, e.HasUpstream = total, true
	return nil
}

// setMillis reads a time in milliseconds.
func setMillis(e *Entry, s string) error {
	d, ok := decimal(s, time.Millisecond)
	if !ok {
		return fmt.Errorf("time %q: want milliseconds", s)
	}
	e.Upstream, e.HasUpstream = d, true
	return nil
}

// decimal reads a non-negative decimal number of units, without
// allocating; at most a day.
func decimal(s string, unit time.Duration) (time.Duration, bool) {
	whole, frac, _ := strings.Cut(s, ".")
	if whole == "" && frac == "" || len(whole) > 9 {
		return 0, false
	}
	var d time.Duration
	for i := 0; i < len(whole); i++ {
		c := whole[i] - '0'
		if c > 9 {
			return 0, false
		}
		d = d*10 + time.Duration(c)
	}
	d *= unit
	scale := unit / 10
	for i := 0; i < len(frac); i++ {
		c := frac[i] - '0'
		if c > 9 {
			return 0, false
		}
		d += time.Duration(c) * scale
		scale /= 10
	}
	return d, d <= 24*time.Hour
}

// atoi reads a small non-negative integer without allocating.
func atoi(s string) (int, error) {
	if s == "" || len(s) > 9 {
		return 0, errors.New("not a number")
	}
	n, err := atoi64(s)
	return int(n), err
}
