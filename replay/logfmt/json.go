package logfmt

import (
	"errors"
	"fmt"
	"net/textproto"
	"strings"

	"github.com/tidwall/gjson"
)

// Mapping names, for JSON logs, the key that holds each field: client_ip,
// user, api_key, method, path (or request: "GET /x HTTP/1.1"), time,
// status, upstream_time (seconds), upstream_ms (milliseconds), and
// header:<Name> for a request header a rule or class reads. A field it
// names replaces that field's default keys.
type Mapping map[string]string

// ParseMapping reads "field=key" pairs, as -map takes them.
func ParseMapping(pairs []string) (Mapping, error) {
	m := Mapping{}
	for _, p := range pairs {
		f, k, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("-map %q: want field=key", p)
		}
		if _, known := fieldOf(f); !known {
			return nil, fmt.Errorf("-map %q: unknown field %q (want client_ip, user, api_key, method, path, request, time, status, upstream_time, upstream_ms or header:<Name>)", p, f)
		}
		m[f] = k
	}
	return m, nil
}

// field is an Entry field a JSON key fills.
type field uint8

const (
	fTime field = iota
	fIP
	fMethod
	fPath
	fRequest
	fStatus
	fUpstreamSeconds
	fUpstreamMillis
	fUser
	fAPIKey
	fHeader
	numFields
)

var fieldNames = map[string]field{
	"time": fTime, "client_ip": fIP, "method": fMethod, "path": fPath, "request": fRequest, "status": fStatus,
	"upstream_time": fUpstreamSeconds, "upstream_ms": fUpstreamMillis, "user": fUser, "api_key": fAPIKey,
}

func fieldOf(name string) (field, bool) {
	if h, ok := strings.CutPrefix(name, "header:"); ok {
		return fHeader, h != ""
	}
	f, ok := fieldNames[name]
	return f, ok
}

// defaultKeys are the keys nginx's, Envoy's and sluice's JSON logs use,
// in order of preference for each field.
var defaultKeys = [...][]string{
	fTime:            {"time", "time_iso8601", "timestamp", "@timestamp", "start_time", "time_local", "msec"},
	fIP:              {"client_ip", "remote_addr", "x_forwarded_for", "http_x_forwarded_for", "downstream_remote_address"},
	fMethod:          {"method", "request_method"},
	fPath:            {"path", "request_uri", "uri"},
	fRequest:         {"request"},
	fStatus:          {"status", "response_code", "status_code"},
	fUpstreamSeconds: {"upstream_response_time", "upstream_time", "request_time"},
	fUpstreamMillis:  {"upstream_ms", "upstream_service_time", "duration"},
	fUser:            {"user", "user_id", "remote_user", "http_x_user_id"},
	fAPIKey:          {"api_key", "http_x_api_key", "x_api_key"},
}

// slot is what one JSON key fills.
type slot struct {
	field  field
	prio   int
	header int // for fHeader, the index in jsonFields.headers
}

// jsonFields is a Mapping compiled: each key's slot.
type jsonFields struct {
	keys    map[string]slot
	headers []string // canonical names
}

func newJSONFields(m Mapping) (*jsonFields, error) {
	jf := &jsonFields{keys: map[string]slot{}}
	mapped := [numFields]bool{}
	for name, key := range m {
		f, _ := fieldOf(name)
		s := slot{field: f}
		if f == fHeader {
			s.header = len(jf.headers)
			jf.headers = append(jf.headers, textproto.CanonicalMIMEHeaderKey(strings.TrimPrefix(name, "header:")))
		} else {
			mapped[f] = true
		}
		if _, dup := jf.keys[key]; dup {
			return nil, fmt.Errorf("-map: key %q named twice", key)
		}
		jf.keys[key] = s
	}
	for f, keys := range defaultKeys {
		if mapped[f] {
			continue
		}
		for prio, k := range keys {
			if _, taken := jf.keys[k]; !taken {
				jf.keys[k] = slot{field: field(f), prio: prio + 1}
			}
		}
	}
	// The upstream's time in either unit: one order of preference.
	for prio, k := range upstreamOrder {
		if sl, ok := jf.keys[k]; ok && sl.prio > 0 {
			sl.prio = prio + 1
			jf.keys[k] = sl
		}
	}
	return jf, nil
}

// upstreamOrder is the preference among the upstream time's keys, both
// units together: the upstream's own time before the whole request's.
var upstreamOrder = []string{"upstream_ms", "upstream_response_time", "upstream_service_time", "upstream_time", "duration", "request_time"}

// parse reads one JSON object into e.
func (jf *jsonFields) parse(s string, e *Entry, z *zoneCache) error {
	if !gjson.Valid(s) {
		return errors.New("not a JSON object")
	}
	var vals [numFields]string
	var prios [numFields]int
	for i := range prios {
		prios[i] = 1 << 30
	}
	var err error
	gjson.Parse(s).ForEach(func(k, v gjson.Result) bool {
		sl, ok := jf.keys[k.Str]
		if !ok || v.Type == gjson.Null || v.Type == gjson.JSON {
			return true
		}
		val := v.Str
		if v.Type != gjson.String {
			val = v.Raw
		}
		if sl.field == fHeader {
			e.Headers = append(e.Headers, [2]string{jf.headers[sl.header], val})
			return true
		}
		if val == "" || val == "-" || sl.prio >= prios[sl.field] {
			return true
		}
		vals[sl.field], prios[sl.field] = val, sl.prio
		return true
	})
	if vals[fTime] == "" {
		return errors.New("no time")
	}
	if e.Time, err = z.parseAnyTime(vals[fTime]); err != nil {
		return err
	}
	if ip := vals[fIP]; ip != "" {
		first, _, _ := strings.Cut(ip, ",")
		if err := setIP(e, strings.TrimSpace(first)); err != nil {
			return err
		}
	}
	switch {
	case vals[fMethod] != "" && vals[fPath] != "":
		if err := setTarget(e, vals[fMethod], vals[fPath]); err != nil {
			return err
		}
	case vals[fRequest] != "":
		if err := setRequest(e, vals[fRequest]); err != nil {
			return err
		}
	default:
		return errors.New("no method and path (nor request)")
	}
	if st := vals[fStatus]; st != "" {
		if e.Status, err = atoi(st); err != nil {
			return fmt.Errorf("status %q", st)
		}
	}
	switch {
	case vals[fUpstreamMillis] != "" && (vals[fUpstreamSeconds] == "" || prios[fUpstreamMillis] < prios[fUpstreamSeconds]):
		if err := setMillis(e, vals[fUpstreamMillis]); err != nil {
			return err
		}
	case vals[fUpstreamSeconds] != "":
		if err := setSeconds(e, vals[fUpstreamSeconds]); err != nil {
			return err
		}
	}
	e.User, e.APIKey = vals[fUser], vals[fAPIKey]
	return nil
}
