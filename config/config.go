// Package config is sluice's configuration schema: the YAML (or JSON) file
// the README's configuration reference describes, decoded strictly. An
// unknown key, a bad value or a contradiction is an error that names the
// file, the rule, the field and its line; defaults are filled for
// everything optional. It knows the static
// algorithms (it builds their policies) and nothing of HTTP; every face
// and the engine import it, and it imports no face (docs/ARCHITECTURE.md).
package config

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"
	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice/static"
)

// Duration is a time.Duration that decodes from a Go duration string
// ("500ms", "1m") or a number of seconds (30, 0.5).
type Duration time.Duration

// UnmarshalYAML implements yaml.Unmarshaler.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: want a duration such as 500ms, 1m, or a number of seconds", n.Line)
	}
	if f, err := strconv.ParseFloat(n.Value, 64); err == nil {
		if f < 0 || math.IsNaN(f) || f > float64(static.MaxWindow/time.Second) {
			return fmt.Errorf("line %d: %v seconds is out of range", n.Line, n.Value)
		}
		*d = Duration(f * float64(time.Second))
		return nil
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %q is not a duration (want e.g. 500ms, 1m, or seconds)", n.Line, n.Value)
	}
	if v < 0 {
		return fmt.Errorf("line %d: %q is negative", n.Line, n.Value)
	}
	*d = Duration(v)
	return nil
}

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// Config is a whole sidecar configuration.
type Config struct {
	// Listen is the proxy's address; default 127.0.0.1:8080.
	Listen string `yaml:"listen"`
	// Upstream is the protected service's URL. Required to run the proxy.
	Upstream string `yaml:"upstream"`
	// Admin is the admin port's address; default 127.0.0.1:9901.
	Admin string `yaml:"admin"`
	// AdminHosts are host names the admin port answers to besides
	// localhost and IP literals (e.g. a Kubernetes service name). Requests
	// naming any other host are refused (DNS rebinding).
	AdminHosts []string `yaml:"admin_hosts"`
	// ShutdownGrace is how long in-flight requests may run after SIGTERM;
	// default 10s.
	ShutdownGrace Duration `yaml:"shutdown_grace"`
	// UpstreamTimeout bounds each wait on the upstream: for the response
	// headers once the request was sent, and for each next piece of the
	// response body (an upstream that stalls mid-body is cut off). Either
	// is a Dropped outcome (504 before the headers). Default 30s.
	UpstreamTimeout Duration `yaml:"upstream_timeout"`
	// ReadTimeout bounds reading a whole request from the client, headers
	// and body; default 60s. A client that trickles its request is cut off.
	ReadTimeout Duration `yaml:"read_timeout"`
	// WriteTimeout bounds each write of a response to the client; default
	// 30s, within [1ms, 1h]. A client that stops reading for that long is
	// cut off and what its request held is given back (nginx's
	// send_timeout).
	WriteTimeout Duration `yaml:"write_timeout"`
	// IdleTimeout closes a keep-alive connection idle this long; default 75s
	// (nginx's keepalive_timeout).
	IdleTimeout Duration `yaml:"idle_timeout"`
	// MaxHeaderBytes bounds a request's headers; default 65536 (64 KiB).
	// Larger requests get 431.
	MaxHeaderBytes int `yaml:"max_header_bytes"`
	// RequestBuffer is how many bytes of a request body the proxy reads
	// before the request takes an adaptive slot; default 16384 (16 KiB).
	// A body that fits is read whole first, so a slow upload holds no
	// slot; a larger one streams its rest while holding it.
	RequestBuffer int `yaml:"request_buffer"`
	// UploadMinRate is the least pace, in bytes per second, of the part of
	// a request body streamed past request_buffer (while the request holds
	// its adaptive slot and its concurrency permits): every UploadWindow
	// must bring UploadMinRate x 5 bytes, or the upload is cut with 408 and
	// what the request held is given back. Bytes sent fast earn no credit
	// for later windows. Default 1024; 0 turns the pace off (read_timeout
	// alone bounds the upload). read_timeout still bounds the whole request.
	UploadMinRate *int `yaml:"upload_min_rate"`
	// CaseSensitivePaths makes every rule's path pattern case sensitive
	// unless its match says otherwise. Default false: routers such as
	// Express and ASP.NET route /ADMIN to /admin's handler, so a rule must
	// count it.
	CaseSensitivePaths bool `yaml:"case_sensitive_paths"`
	// Proxy configures the reverse proxy's HTTP engine.
	Proxy    Proxy    `yaml:"proxy"`
	Store    Store    `yaml:"store"`
	Identity Identity `yaml:"identity"`
	Adaptive Adaptive `yaml:"adaptive"`
	Queue    Queue    `yaml:"queue"`
	// Deadlines reads clients' deadlines: work they will not wait for is
	// refused before it reaches the service.
	Deadlines Deadlines `yaml:"deadlines"`
	// RulesSource, when set, is where the rules come from instead of
	// Rules: ZooKeeper, watched for changes.
	RulesSource RulesSource `yaml:"rules_source"`
	// RLS serves Envoy's rate limit service (gRPC) over the same rules.
	RLS   RLS    `yaml:"rls"`
	Rules []Rule `yaml:"rules"`

	// File is the file the configuration came from ("" when decoded from
	// bytes alone); errors name it.
	File string `yaml:"-"`
}

// Proxy configures the reverse proxy.
type Proxy struct {
	// Engine is fast (default: HTTP/1.1 on fasthttp, h2c and upgrades
	// on net/http, one listener) or nethttp (net/http for everything).
	Engine ProxyEngine `yaml:"engine"`
	// UnderscoresInHeaders forwards request headers whose names hold an
	// underscore. Off by default, as nginx's underscores_in_headers: such
	// headers are dropped before the rules and the upstream see them,
	// because WSGI and CGI services read "X_API_Key" as "X-API-Key", a
	// spelling the rules would not have matched.
	UnderscoresInHeaders bool `yaml:"underscores_in_headers"`
}

// Store selects and configures the static limits' store.
type Store struct {
	// Type is "memory" (default), "redis" or "gossip".
	Type   StoreType   `yaml:"type"`
	Memory MemoryStore `yaml:"memory"`
	Redis  RedisStore  `yaml:"redis"`
	Gossip GossipStore `yaml:"gossip"`
}

// GossipStore configures the gossip store: the sidecars share usage with
// each other (hashicorp/memberlist), no Redis.
type GossipStore struct {
	// Bind is the host:port to gossip on (UDP and TCP); default
	// 127.0.0.1:7946.
	Bind string `yaml:"bind"`
	// Join are members to join at start.
	Join []string `yaml:"join"`
	// SyncInterval is how often usage is sent; default 100ms.
	SyncInterval Duration `yaml:"sync_interval"`
	// Node names this sidecar; default its bind address.
	Node string `yaml:"node"`
}

// RegionRedis is one region's Redis, for rules with scope: global.
type RegionRedis struct {
	Addrs      []string  `yaml:"addrs"`
	MasterName string    `yaml:"master_name"`
	Username   string    `yaml:"username"`
	Password   string    `yaml:"password"`
	DB         int       `yaml:"db"`
	TLS        *RedisTLS `yaml:"tls"`
}

// RedisTLS connects to Redis over TLS (redis-server's tls-port; the
// rediss:// of envoyproxy/ratelimit's REDIS_TLS). Paths are relative to
// the configuration file. An empty block ({}) verifies the servers against
// the system's roots.
type RedisTLS struct {
	// CAFile is the CA the servers' certificates must chain to; default
	// the system's roots.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are the client's certificate and key, for
	// servers that require one (tls-auth-clients yes); both or neither.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ServerName is the name the servers' certificates must carry, when
	// not the host of the address dialled.
	ServerName string `yaml:"server_name"`
}

// Check reports a block that names a client certificate without its key,
// or the other way round.
func (t *RedisTLS) Check() error {
	if t != nil && (t.CertFile == "") != (t.KeyFile == "") {
		return errors.New("cert_file and key_file go together")
	}
	return nil
}

// MemoryStore configures the embedded store.
type MemoryStore struct {
	// MaxKeys bounds the keys held; default 1000000.
	MaxKeys int `yaml:"max_keys"`
}

// RedisStore configures the Redis store.
type RedisStore struct {
	// Addrs: one for a single node, several for a Cluster, the Sentinels'
	// with MasterName.
	Addrs      []string `yaml:"addrs"`
	MasterName string   `yaml:"master_name"`
	Username   string   `yaml:"username"`
	Password   string   `yaml:"password"`
	DB         int      `yaml:"db"`
	// TLS, when set, connects over TLS (every node, and the Sentinels).
	TLS *RedisTLS `yaml:"tls"`
	// Prefix of every key; default "sluice".
	Prefix string `yaml:"prefix"`
	// Timeout per round trip; default 50ms.
	Timeout Duration `yaml:"timeout"`
	// OnError is the default failure policy: local (default), open, closed.
	OnError FailurePolicy `yaml:"on_error"`
	// Instances is how many sidecars share the quota (for local); default 1.
	Instances int `yaml:"instances"`
	// Consistency is exact (default: every check in Redis) or eventual
	// (decided locally, synced every SyncInterval); rules may override it.
	Consistency Consistency `yaml:"consistency"`
	// SyncInterval is how often eventual rules sync and regional budgets
	// are rebalanced; default 100ms.
	SyncInterval Duration `yaml:"sync_interval"`
	// DenyCacheKeys bounds the keys exact mode remembers as over their
	// limit until their reset (denied without a round trip); default
	// 100000, 0 turns it off.
	DenyCacheKeys *int `yaml:"deny_cache_keys"`
	// Region is this sidecar's region, a key of Regions; required by rules
	// with scope: global. Its Redis is Regions[Region] (Addrs then stays
	// empty or names the same servers).
	Region string `yaml:"region"`
	// Regions is every region's Redis.
	Regions map[string]RegionRedis `yaml:"regions"`
}

// Identity says how clients are identified.
type Identity struct {
	// TrustedProxies are the peers whose X-Forwarded-For / Forwarded headers
	// are believed (CIDRs or addresses). Default: none.
	TrustedProxies []string `yaml:"trusted_proxies"`
	// UserHeader carries the user id; default X-User-ID.
	UserHeader string `yaml:"user_header"`
	// UserFrom is the one place the user id comes from: "header" (default:
	// UserHeader) or "jwt" (the sub claim of an "Authorization: Bearer"
	// JWT; UserHeader is then ignored, so a client cannot name itself).
	// sluice does not verify the token: with "jwt", a client that forges a
	// token spends the quota of the user it names. Use it only behind a
	// gateway that verifies tokens, or for limits where that is harmless.
	UserFrom string `yaml:"user_from"`
	// UserFromJWT is the older spelling of user_from: jwt.
	UserFromJWT bool `yaml:"user_from_jwt"`
	// IPv4Prefix and IPv6Prefix are how many leading bits of a client
	// address key ip_address rules: default 32 (one quota per IPv4
	// address) and 64 (one per IPv6 /64, the block one host is usually
	// given: a client cannot take a new quota with each of its addresses).
	IPv4Prefix int `yaml:"ipv4_prefix"`
	IPv6Prefix int `yaml:"ipv6_prefix"`
	// APIKeyHeader carries the API key; default X-API-Key.
	APIKeyHeader string `yaml:"api_key_header"`
}

// Adaptive configures the adaptive concurrency limit.
type Adaptive struct {
	// Algorithm: gradient2 (default), vegas, aimd, fixed, off.
	Algorithm    AdaptiveAlgorithm `yaml:"algorithm"`
	InitialLimit int               `yaml:"initial_limit"`
	MinLimit     int               `yaml:"min_limit"`
	MaxLimit     int               `yaml:"max_limit"`
	// ElasticHeadroom: elastic rules may exceed their quota while in-flight
	// is below this fraction of the adaptive limit; default 0.8.
	ElasticHeadroom float64 `yaml:"elastic_headroom"`
	// Classes are the priority classes, highest first; none: one class.
	Classes []Class `yaml:"classes"`
	// DefaultClass names the class of requests no class matches; default
	// the last (lowest) class.
	DefaultClass string `yaml:"default_class"`
}

// Class is a priority class: a guaranteed share of the adaptive limit for
// the requests its match block fits.
type Class struct {
	Name string `yaml:"name"`
	// Share is the fraction of the adaptive limit guaranteed to the class,
	// in [0, 1]; the shares sum to at most 1. A class borrows what the
	// others leave unused.
	Share float64 `yaml:"share"`
	// Match is the rules' match block; empty matches every request.
	Match Match `yaml:"match"`
	// Deadline is the budget of the class's requests that carry no
	// deadline of their own (0: deadlines.default).
	Deadline Duration `yaml:"deadline"`
}

// Deadlines configures how clients' deadlines are read and passed on.
type Deadlines struct {
	// From are the request headers a deadline is read from, the
	// tightest winning: grpc-timeout in gRPC's format ("250m", "2S"), a
	// name ending in "-ms" as integer milliseconds, any other as a Go
	// duration ("1.5s") or decimal seconds ("1.5"). Default
	// [grpc-timeout, X-Request-Timeout]; [] reads none.
	From []string `yaml:"from"`
	// Default is the budget of a request that carries none; 0 (default):
	// no deadline.
	Default Duration `yaml:"default"`
	// Propagate is the header that carries the remaining budget upstream,
	// in the format From reads it in: "" (default) rewrites every header
	// of From the request carried a budget in with what is left of the
	// tightest (nothing for a default budget), "none" leaves the headers
	// alone.
	Propagate string `yaml:"propagate"`
}

// DefaultDeadlineHeaders are the headers deadlines are read from unless
// deadlines.from says otherwise.
var DefaultDeadlineHeaders = []string{"grpc-timeout", "X-Request-Timeout"}

// Queue configures the wait queue in front of the adaptive limit.
type Queue struct {
	// MaxSize is the most waiting requests; default 100; 0 after an
	// explicit "max_size: 0" disables queueing.
	MaxSize *int `yaml:"max_size"`
	// ClosedLoopMaxSize is the most waiting requests while the queue holds
	// a closed loop (clients that send again as soon as they are answered,
	// as wrk and most benchmarks do: refusing them only costs CPU, see
	// queue.Config.ClosedLoopSize); default 4096; 0 keeps max_size always.
	ClosedLoopMaxSize *int     `yaml:"closed_loop_max_size"`
	MaxWait           Duration `yaml:"max_wait"`
	// Order: fifo, lifo, adaptive_lifo (default).
	Order QueueOrder `yaml:"order"`
	// Fairness: none (default), user_id, ip_address, api_key or
	// header:<Name>: waiting tenants of a class are served in turn.
	Fairness Fairness `yaml:"fairness"`
}

// Rule is one static limit and where it applies.
type Rule struct {
	RuleID      string `yaml:"rule_id"`
	Description string `yaml:"description"`
	// IdentifierType: user_id, ip_address, api_key, header:<Name>, global.
	IdentifierType    IdentifierType `yaml:"identifier_type"`
	Algorithm         Algorithm      `yaml:"algorithm"`
	Limit             *int64         `yaml:"limit"`
	WindowSizeSeconds *float64       `yaml:"window_size_seconds"`
	Window            Duration       `yaml:"window"`
	Burst             int64          `yaml:"burst"`
	Warmup            Duration       `yaml:"warmup"`
	NoDelay           bool           `yaml:"nodelay"`
	MinInterval       Duration       `yaml:"min_interval"`
	CountBlocked      bool           `yaml:"count_blocked"`
	Timeout           Duration       `yaml:"timeout"`
	// Mode: hard (default), soft, elastic, shadow.
	Mode Mode `yaml:"mode"`
	// SoftPercent: how far over the limit a soft rule admits; default 10.
	SoftPercent *float64 `yaml:"soft_percent"`
	// OnError overrides store.redis.on_error.
	OnError FailurePolicy `yaml:"on_error"`
	// Consistency overrides store.redis.consistency.
	Consistency Consistency `yaml:"consistency"`
	// Scope is region (default) or global: one limit across
	// store.redis.regions, split into regional budgets.
	Scope Scope `yaml:"scope"`
	// MaxWait makes a request over the rule's quota wait up to this long,
	// in arrival order per key, for the quota to come back, instead of an
	// immediate 429; default 0 (no wait), at most 5m.
	MaxWait Duration `yaml:"max_wait"`
	Match   Match    `yaml:"match"`
	// Priority orders rules: lower first. Default 0.
	Priority int `yaml:"priority"`
	// Descriptor makes the rule one for Envoy's rate limit service
	// (rls.listen): it applies to the descriptors it matches, keyed by
	// their values, instead of to HTTP requests.
	Descriptor *Descriptor `yaml:"descriptor"`
	// Replaces lists descriptor rules this one replaces: when both apply
	// to one request, only this one is checked (envoyproxy/ratelimit's
	// replaces).
	Replaces []string `yaml:"replaces"`
}

// Match says which requests a rule applies to. Every set field must match.
type Match struct {
	// PathPattern: "/orders/*" (* one segment), "/api/**" (any tail).
	PathPattern string   `yaml:"path_pattern"`
	Methods     []string `yaml:"methods"`
	// RequiresAuthentication: a user id is present.
	RequiresAuthentication bool              `yaml:"requires_authentication"`
	RequiredHeaders        map[string]string `yaml:"required_headers"`
	// IPSubnet: the client address is in this CIDR (IPv4 or IPv6).
	IPSubnet string `yaml:"ip_subnet"`
	// CaseSensitive: compare the path pattern with the request's path
	// letter for letter. Default: the configuration's case_sensitive_paths
	// (false: /Admin/x counts for a rule on /admin/**).
	CaseSensitive *bool `yaml:"case_sensitive"`
}

// ReservedRuleID names the adaptive concurrency limit in shed responses and
// metrics; no rule may take it.
const ReservedRuleID = "adaptive_concurrency"

// DefaultUploadMinRate is upload_min_rate's default, in bytes per second.
const DefaultUploadMinRate = 1024

// UploadWindow is the span over which a streamed upload's pace is
// measured (upload_min_rate): long enough for a client's slow start and a
// lost packet's retransmission, short enough to free a slot soon.
const UploadWindow = 5 * time.Second

// Load reads and decodes the file at path.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return Parse(path, data)
}

var (
	lineRE     = regexp.MustCompile(`line (\d+)`)
	badValueRE = regexp.MustCompile(`bad value (\S+)`)
	// quotedValueRE finds the value a field's decoder refused
	// (`"soon" is not a duration`).
	quotedValueRE = regexp.MustCompile(`^("(?:[^"\\]|\\.)*") is not`)
	// unknownFieldRE finds the field cleanYAML names unknown.
	unknownFieldRE = regexp.MustCompile(`unknown field (\S+)`)
)

// Parse decodes data (YAML or JSON) strictly, fills defaults and validates.
// file names the source in errors.
func Parse(file string, data []byte) (*Config, error) {
	if file == "" {
		file = "config"
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("%s: %s", file, cleanYAML(err))
	}
	c := &Config{File: file}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, fmt.Errorf("%s: empty configuration", file)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil {
		var ve *valueError
		if errors.As(err, &ve) {
			msg := fmt.Sprintf("%q is not %s (line %d)", ve.value, ve.want, ve.line)
			path := findKey(root.Content, nil, func(_, v *yaml.Node) bool {
				return v.Line == ve.line && v.Kind == yaml.ScalarNode && v.Value == ve.value
			})
			if len(path) > 0 {
				msg = strings.Join(path, ".") + ": " + msg
			}
			if id := ruleAtLine(&root, ve.line); id != "" {
				return nil, fmt.Errorf("%s: rule %q: %s", file, id, msg)
			}
			return nil, fmt.Errorf("%s: %s", file, msg)
		}
		msg := cleanYAML(err)
		if m := lineRE.FindStringSubmatch(msg); m != nil {
			// "path: what (line N)", as every other error says it; the
			// path is found by the key (an unknown field's parent) or the
			// value (a bad value's key) on that line, not by the line
			// alone: flow-style YAML and one-line JSON hold many keys.
			line, _ := strconv.Atoi(m[1])
			what := strings.TrimSpace(strings.TrimPrefix(msg[strings.Index(msg, m[0]):], m[0]+":"))
			if i := strings.Index(what, "; line "); i >= 0 {
				what = what[:i] // the first of several
			}
			var path []string
			if uf := unknownFieldRE.FindStringSubmatch(what); uf != nil {
				path = findKey(root.Content, nil, func(k, _ *yaml.Node) bool { return k.Line == line && k.Value == uf[1] })
				if len(path) > 0 {
					path = path[:len(path)-1] // the mapping that does not know the field
				}
			} else if strings.HasPrefix(what, "a map where") || strings.HasPrefix(what, "a list where") {
				path = findKey(root.Content, nil, func(_, v *yaml.Node) bool { return v.Line == line && v.Kind != yaml.ScalarNode })
			} else if bv := badValueRE.FindStringSubmatch(what); bv != nil || quotedValueRE.MatchString(what) {
				if bv == nil {
					bv = quotedValueRE.FindStringSubmatch(what)
					bv[1], _ = strconv.Unquote(bv[1])
				}
				path = findKey(root.Content, nil, func(_, v *yaml.Node) bool {
					return v.Line == line && v.Kind == yaml.ScalarNode && v.Value == bv[1]
				})
			}
			where := ""
			if len(path) > 0 {
				where = strings.Join(path, ".") + ": "
			}
			if id := ruleAtLine(&root, line); id != "" {
				return nil, fmt.Errorf("%s: rule %q: %s%s (line %d)", file, id, where, what, line)
			}
			return nil, fmt.Errorf("%s: %s%s (line %d)", file, where, what, line)
		}
		return nil, fmt.Errorf("%s: %s", file, msg)
	}
	c.File = file
	c.SetDefaults()
	if err := c.Validate(); err != nil {
		return nil, withLine(&root, file, err)
	}
	if c.RulesSource.ZooKeeper != nil && len(c.Rules) > 0 {
		return nil, fmt.Errorf("%s: rules: the rules come from rules_source.zookeeper; remove rules: from the file "+
			"(push them with `sluice rules push`)", file)
	}
	return c, nil
}

// cleanYAML turns yaml.v3's messages into ours.
func cleanYAML(err error) string {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	msg = strings.ReplaceAll(msg, "unmarshal errors:\n  ", "")
	msg = strings.ReplaceAll(msg, "\n  ", "; ")
	msg = regexp.MustCompile(`field (\S+) not found in type \S+`).ReplaceAllString(msg, "unknown field $1")
	msg = regexp.MustCompile(`cannot unmarshal !!\w+ `+"`"+`([^`+"`"+`]*)`+"`"+` into \S+`).ReplaceAllString(msg, "bad value $1")
	msg = regexp.MustCompile(`cannot unmarshal !!(map|seq) into (\S+)`).ReplaceAllStringFunc(msg, func(m string) string {
		f := strings.Fields(m) // cannot unmarshal !!kind into type
		kind, typ := map[string]string{"!!map": "map", "!!seq": "list"}[f[2]], f[4]
		switch {
		case strings.HasPrefix(typ, "[]"):
			typ = "list"
		case strings.HasPrefix(typ, "map["):
			typ = "map"
		case strings.Contains(typ, "."):
			typ = "value" // one of ours: a word, a duration, a size
		}
		return "a " + kind + " where a " + typ + " belongs"
	})
	return msg
}

// withLine adds to a validation error ("file: path: what" or "file: rule
// "id": path: what") the line of the field it names, when the file spells
// that field out, so that every error of a file says where, as decoding
// errors do.
func withLine(root *yaml.Node, file string, err error) error {
	msg := err.Error()
	rest, ok := strings.CutPrefix(msg, file+": ")
	if !ok {
		return err
	}
	nodes := root.Content
	if r, ok := strings.CutPrefix(rest, "rule "); ok {
		id, qerr := strconv.QuotedPrefix(r)
		if qerr != nil {
			return err // "rule #1": a rule without an id
		}
		rest = strings.TrimPrefix(r[len(id):], ": ")
		id, _ = strconv.Unquote(id)
		nodes = nil
		for _, item := range ruleNodes(root) {
			for i := 0; i+1 < len(item.Content); i += 2 {
				if item.Content[i].Value == "rule_id" && item.Content[i+1].Value == id {
					nodes = []*yaml.Node{item}
				}
			}
		}
	}
	path, _, ok := strings.Cut(rest, ": ")
	if !ok || strings.ContainsAny(path, " \"[") {
		return err
	}
	at := nodeAt(nodes, strings.Split(path, "."))
	if at == nil {
		return err
	}
	return fmt.Errorf("%s (line %d)", msg, at.Line)
}

// ruleNodes returns the mappings of the file's rules list.
func ruleNodes(root *yaml.Node) []*yaml.Node {
	if len(root.Content) == 0 || root.Content[0].Kind != yaml.MappingNode {
		return nil
	}
	m := root.Content[0]
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == "rules" && m.Content[i+1].Kind == yaml.SequenceNode {
			return m.Content[i+1].Content
		}
	}
	return nil
}

// nodeAt returns the key node at the dotted path keys within the first
// mapping of nodes (a document's), or nil.
func nodeAt(nodes []*yaml.Node, keys []string) *yaml.Node {
	var n *yaml.Node
	for _, c := range nodes {
		if c.Kind == yaml.DocumentNode && len(c.Content) > 0 {
			c = c.Content[0]
		}
		if c.Kind == yaml.MappingNode {
			n = c
			break
		}
	}
	for i, key := range keys {
		if n == nil || n.Kind != yaml.MappingNode {
			return nil
		}
		var next *yaml.Node
		for j := 0; j+1 < len(n.Content); j += 2 {
			if n.Content[j].Value == key {
				if i == len(keys)-1 {
					return n.Content[j]
				}
				next = n.Content[j+1]
			}
		}
		n = next
	}
	return nil
}

// findKey returns the dotted path, as a list, of the first mapping key in
// nodes (under path) for which match holds. Inside the rules list a path
// starts again at the rule (errors name the rule apart); inside another
// list an item adds its index.
func findKey(nodes []*yaml.Node, path []string, match func(k, v *yaml.Node) bool) []string {
	for _, n := range nodes {
		switch n.Kind {
		case yaml.DocumentNode:
			if p := findKey(n.Content, path, match); p != nil {
				return p
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				here := append(append([]string(nil), path...), k.Value)
				if match(k, v) {
					return here
				}
				if v.Kind == yaml.SequenceNode {
					for j, item := range v.Content {
						sub := append(append([]string(nil), path...), fmt.Sprintf("%s[%d]", k.Value, j))
						if len(path) == 0 && k.Value == "rules" {
							sub = []string{}
						}
						if p := findKey([]*yaml.Node{item}, sub, match); p != nil {
							return p
						}
					}
					continue
				}
				if p := findKey([]*yaml.Node{v}, here, match); p != nil {
					return p
				}
			}
		}
	}
	return nil
}

// ruleAtLine returns the rule_id of the rule whose YAML spans line.
func ruleAtLine(root *yaml.Node, line int) string {
	if len(root.Content) == 0 {
		return ""
	}
	doc := root.Content[0]
	for i := 0; i+1 < len(doc.Content); i += 2 {
		if doc.Content[i].Value != "rules" || doc.Content[i+1].Kind != yaml.SequenceNode {
			continue
		}
		rules := doc.Content[i+1].Content
		for j, r := range rules {
			end := math.MaxInt
			if j+1 < len(rules) {
				end = rules[j+1].Line
			}
			if line >= r.Line && line < end {
				for k := 0; k+1 < len(r.Content); k += 2 {
					if r.Content[k].Value == "rule_id" {
						return r.Content[k+1].Value
					}
				}
				return fmt.Sprintf("#%d", j+1)
			}
		}
	}
	return ""
}

// Clone returns a copy of c that SetDefaults can fill without touching c:
// the rules are copied; what they point to is shared and never written.
func (c *Config) Clone() *Config {
	n := *c
	n.Rules = append([]Rule(nil), c.Rules...)
	n.Adaptive.Classes = append([]Class(nil), c.Adaptive.Classes...)
	if z := c.RulesSource.ZooKeeper; z != nil {
		cp := *z
		n.RulesSource.ZooKeeper = &cp
	}
	if n.File == "" {
		n.File = "config"
	}
	return &n
}

// setDefault sets *s to v when it is empty.
func setDefault[T ~string](s *T, v T) {
	if *s == "" {
		*s = v
	}
}

// SetDefaults fills every optional field left empty.
func (c *Config) SetDefaults() {
	def := setDefault[string]
	def(&c.Listen, "127.0.0.1:8080")
	def(&c.Admin, "127.0.0.1:9901")
	setDefault(&c.Proxy.Engine, ProxyFast)
	if c.ShutdownGrace == 0 {
		c.ShutdownGrace = Duration(10 * time.Second)
	}
	if c.Deadlines.From == nil {
		c.Deadlines.From = slices.Clone(DefaultDeadlineHeaders)
	}
	if c.UpstreamTimeout == 0 {
		c.UpstreamTimeout = Duration(30 * time.Second)
	}
	if c.ReadTimeout == 0 {
		c.ReadTimeout = Duration(60 * time.Second)
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = Duration(30 * time.Second)
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = Duration(75 * time.Second)
	}
	if c.MaxHeaderBytes == 0 {
		c.MaxHeaderBytes = 64 << 10
	}
	if c.RequestBuffer == 0 {
		c.RequestBuffer = 16 << 10
	}
	if c.RLS.NearLimitRatio == 0 {
		c.RLS.NearLimitRatio = 0.8
	}
	if c.UploadMinRate == nil {
		n := DefaultUploadMinRate
		c.UploadMinRate = &n
	}
	setDefault(&c.Store.Type, StoreMemory)
	if c.Store.Memory.MaxKeys == 0 {
		c.Store.Memory.MaxKeys = static.DefaultMaxKeys
	}
	r := &c.Store.Redis
	def(&r.Prefix, "sluice")
	setDefault(&r.OnError, "local")
	if r.Timeout == 0 {
		r.Timeout = Duration(50 * time.Millisecond)
	}
	if r.Instances == 0 {
		r.Instances = 1
	}
	setDefault(&r.Consistency, ConsistencyExact)
	if r.SyncInterval == 0 {
		r.SyncInterval = Duration(100 * time.Millisecond)
	}
	if r.DenyCacheKeys == nil {
		n := 100_000
		r.DenyCacheKeys = &n
	}
	if r.Region != "" && len(r.Addrs) == 0 {
		if rr, ok := r.Regions[r.Region]; ok {
			r.Addrs, r.MasterName, r.Username, r.Password, r.DB = rr.Addrs, rr.MasterName, rr.Username, rr.Password, rr.DB
		}
	}
	g := &c.Store.Gossip
	def(&g.Bind, "127.0.0.1:7946")
	if g.SyncInterval == 0 {
		g.SyncInterval = Duration(100 * time.Millisecond)
	}
	for i := range c.Rules {
		setDefault(&c.Rules[i].Scope, ScopeRegion)
	}
	c.RulesSource.setDefaults()
	def(&c.Identity.UserHeader, "X-User-ID")
	if c.Identity.UserFrom == "" {
		c.Identity.UserFrom = "header"
		if c.Identity.UserFromJWT {
			c.Identity.UserFrom = "jwt"
		}
	}
	if c.Identity.IPv4Prefix == 0 {
		c.Identity.IPv4Prefix = 32
	}
	if c.Identity.IPv6Prefix == 0 {
		c.Identity.IPv6Prefix = 64
	}
	def(&c.Identity.APIKeyHeader, "X-API-Key")
	a := &c.Adaptive
	setDefault(&a.Algorithm, "gradient2")
	if a.InitialLimit == 0 {
		a.InitialLimit = 20
	}
	if a.MinLimit == 0 {
		a.MinLimit = 1
	}
	if a.MaxLimit == 0 {
		a.MaxLimit = 1000
	}
	if a.ElasticHeadroom == 0 {
		a.ElasticHeadroom = 0.8
	}
	if a.DefaultClass == "" && len(a.Classes) > 0 {
		a.DefaultClass = a.Classes[len(a.Classes)-1].Name
	}
	q := &c.Queue
	if q.MaxSize == nil {
		n := 100
		q.MaxSize = &n
	}
	if q.ClosedLoopMaxSize == nil {
		n := 4096
		q.ClosedLoopMaxSize = &n
	}
	if q.MaxWait == 0 {
		q.MaxWait = Duration(500 * time.Millisecond)
	}
	setDefault(&q.Order, "adaptive_lifo")
	setDefault(&q.Fairness, FairnessNone)
	for i := range c.Rules {
		rl := &c.Rules[i]
		setDefault(&rl.Mode, ModeHard)
		if rl.SoftPercent == nil {
			v := 10.0
			rl.SoftPercent = &v
		}
	}
}

// Validate reports the first problem, naming the file, the rule and the
// field. It expects SetDefaults to have run.
func (c *Config) Validate() error {
	top := func(field, format string, args ...any) error {
		return fmt.Errorf("%s: %s: %s", c.File, field, fmt.Sprintf(format, args...))
	}
	for _, a := range []struct{ field, v string }{{"listen", c.Listen}, {"admin", c.Admin}} {
		if _, _, err := splitHostPort(a.v); err != nil {
			return top(a.field, "%v", err)
		}
	}
	if c.MaxHeaderBytes < 1024 || c.MaxHeaderBytes > 16<<20 {
		return top("max_header_bytes", "%d is outside [1024, 16777216]", c.MaxHeaderBytes)
	}
	if d := c.WriteTimeout.D(); d < time.Millisecond || d > time.Hour {
		return top("write_timeout", "%v is outside [1ms, 1h]", d)
	}
	if c.RequestBuffer < 0 || c.RequestBuffer > 64<<20 {
		return top("request_buffer", "%d is outside [0, 67108864]", c.RequestBuffer)
	}
	if n := *c.UploadMinRate; n < 0 || n > 1<<30 {
		return top("upload_min_rate", "%d is outside [0, 1073741824] bytes per second", n)
	}
	if err := c.Proxy.Engine.Check(); err != nil {
		return top("proxy.engine", "%v", err)
	}
	if err := c.Deadlines.validate(); err != nil {
		return top("deadlines", "%v", err)
	}
	if err := c.Store.Type.Check(); err != nil {
		return top("store.type", "%v", err)
	}
	if err := c.validateSharing(); err != nil {
		return err
	}
	if c.Store.Type == StoreRedis && len(c.Store.Redis.Addrs) == 0 {
		return top("store.redis.addrs", "at least one address is required for store type redis")
	}
	if c.Store.Memory.MaxKeys < 1 {
		return top("store.memory.max_keys", "must be at least 1")
	}
	if err := c.Store.Redis.OnError.Check(); err != nil {
		return top("store.redis.on_error", "%v", err)
	}
	if c.Store.Redis.Instances < 1 {
		return top("store.redis.instances", "must be at least 1")
	}
	if err := c.Store.Redis.TLS.Check(); err != nil {
		return top("store.redis.tls", "%v", err)
	}
	switch id := c.Identity; {
	case id.UserFrom != "header" && id.UserFrom != "jwt":
		return top("identity.user_from", "%q is not header or jwt", id.UserFrom)
	case id.UserFromJWT && id.UserFrom != "jwt":
		return top("identity.user_from_jwt", "contradicts user_from: %s; set one of them", id.UserFrom)
	case id.IPv4Prefix < 1 || id.IPv4Prefix > 32:
		return top("identity.ipv4_prefix", "%d is outside [1, 32]", id.IPv4Prefix)
	case id.IPv6Prefix < 1 || id.IPv6Prefix > 128:
		return top("identity.ipv6_prefix", "%d is outside [1, 128]", id.IPv6Prefix)
	}
	for _, p := range c.Identity.TrustedProxies {
		if _, err := ParsePrefix(p); err != nil {
			return top("identity.trusted_proxies", "%v", err)
		}
	}
	a := c.Adaptive
	if err := a.Algorithm.Check(); err != nil {
		return top("adaptive.algorithm", "%v", err)
	}
	if a.MinLimit < 1 || a.MinLimit > a.MaxLimit {
		return top("adaptive.min_limit", "must be in [1, max_limit (%d)]", a.MaxLimit)
	}
	if a.InitialLimit < a.MinLimit || a.InitialLimit > a.MaxLimit {
		return top("adaptive.initial_limit", "%d is outside [min_limit, max_limit] = [%d, %d]", a.InitialLimit, a.MinLimit, a.MaxLimit)
	}
	if a.ElasticHeadroom <= 0 || a.ElasticHeadroom > 1 {
		return top("adaptive.elastic_headroom", "%v is outside (0, 1]", a.ElasticHeadroom)
	}
	if *c.Queue.ClosedLoopMaxSize < 0 {
		return top("queue.closed_loop_max_size", "must not be negative")
	}
	if *c.Queue.MaxSize < 0 {
		return top("queue.max_size", "must not be negative")
	}
	if err := c.Queue.Order.Check(); err != nil {
		return top("queue.order", "%v", err)
	}
	if err := c.Queue.Fairness.Check(); err != nil {
		return top("queue.fairness", "%v", err)
	}
	if err := a.validateClasses(); err != nil {
		return top("adaptive.classes", "%v", err)
	}
	if err := c.validateSource(); err != nil {
		return err
	}
	if c.RLS.Listen != "" {
		if path, ok := strings.CutPrefix(c.RLS.Listen, "unix:"); ok {
			if path == "" {
				return top("rls.listen", "unix: needs a socket path (unix:/run/sluice/rls.sock)")
			}
		} else if _, _, err := splitHostPort(c.RLS.Listen); err != nil {
			return top("rls.listen", "%v", err)
		}
	}
	if r := c.RLS.NearLimitRatio; !(r > 0 && r <= 1) {
		return top("rls.near_limit_ratio", "%v is outside (0, 1]", r)
	}
	if t := c.RLS.TLS; t != nil && (t.CertFile == "" || t.KeyFile == "") {
		return top("rls.tls", "cert_file and key_file are required")
	}
	seen := map[string]bool{}
	for i := range c.Rules {
		r := &c.Rules[i]
		if r.RuleID == "" {
			return fmt.Errorf("%s: rule #%d: rule_id: required", c.File, i+1)
		}
		if r.RuleID == ReservedRuleID {
			return fmt.Errorf("%s: rule %q: rule_id: reserved for the adaptive limit's shed responses; choose another", c.File, r.RuleID)
		}
		if seen[r.RuleID] {
			return fmt.Errorf("%s: rule %q: rule_id: defined twice", c.File, r.RuleID)
		}
		seen[r.RuleID] = true
		if err := r.validate(); err != nil {
			return fmt.Errorf("%s: rule %q: %w", c.File, r.RuleID, err)
		}
	}
	for i := range c.Rules {
		r := &c.Rules[i]
		for _, id := range r.Replaces {
			if !seen[id] || id == r.RuleID {
				return fmt.Errorf("%s: rule %q: replaces: %q is not another rule", c.File, r.RuleID, id)
			}
		}
	}
	return nil
}

func splitHostPort(addr string) (string, int, error) {
	i := strings.LastIndexByte(addr, ':')
	if i < 0 {
		return "", 0, fmt.Errorf("%q is not host:port", addr)
	}
	port, err := strconv.Atoi(addr[i+1:])
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("%q has no valid port", addr)
	}
	return addr[:i], port, nil
}

// ParsePrefix parses a CIDR or a single address (as a /32 or /128).
func ParsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%q is not a CIDR", s)
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not an address or CIDR", s)
	}
	return netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()), nil
}

func (r *Rule) validate() error {
	if r.Descriptor != nil {
		if err := r.Descriptor.validate(); err != nil {
			return fmt.Errorf("descriptor.%w", err)
		}
		if r.IdentifierType != "" {
			return errors.New("identifier_type: a descriptor rule is keyed by the descriptor's values; remove identifier_type")
		}
		if !reflect.DeepEqual(r.Match, Match{}) {
			return errors.New("match: a descriptor rule matches descriptors, not HTTP requests; remove match")
		}
		if r.Descriptor.Unlimited {
			if r.Algorithm != "" || r.Limit != nil {
				return errors.New("descriptor.unlimited: an unlimited descriptor has no algorithm or limit")
			}
			return nil
		}
		if r.Algorithm == "concurrency" {
			return errors.New("algorithm: concurrency needs each request's end, which Envoy's rate limit API does not report; " +
				"use a rate algorithm, or sluice as the proxy")
		}
	} else if len(r.Replaces) > 0 {
		return errors.New("replaces: only descriptor rules replace others")
	}
	if r.IdentifierType == "" && r.Descriptor == nil {
		return errors.New("identifier_type: required (" + identifierWant + ")")
	}
	if r.Descriptor == nil {
		if err := r.IdentifierType.Check(); err != nil {
			return fmt.Errorf("identifier_type: %w", err)
		}
	}
	if r.Algorithm == "" {
		return errors.New("algorithm: required")
	}
	if r.Limit == nil {
		return errors.New("limit: required")
	}
	if r.WindowSizeSeconds != nil && r.Window != 0 {
		return errors.New("window: set window or window_size_seconds, not both")
	}
	if err := r.Mode.Check(); err != nil {
		return fmt.Errorf("mode: %w", err)
	}
	if sp := *r.SoftPercent; sp < 0 || sp > 1000 || math.IsNaN(sp) {
		return fmt.Errorf("soft_percent: %v is outside [0, 1000]", sp)
	}
	if r.OnError != "" {
		if err := r.OnError.Check(); err != nil {
			return fmt.Errorf("on_error: %w", err)
		}
	}
	if _, err := r.Policy(); err != nil {
		return err
	}
	if r.MaxWait < 0 || r.MaxWait > Duration(5*time.Minute) {
		return fmt.Errorf("max_wait: %v is outside [0s, 5m]", r.MaxWait.D())
	}
	return r.Match.validate()
}

// Equal reports whether a and b configure the same adaptive limit.
func (a Adaptive) Equal(b Adaptive) bool { return reflect.DeepEqual(a, b) }

// ClassNames returns the classes' names, highest first.
func (a Adaptive) ClassNames() []string {
	names := make([]string, len(a.Classes))
	for i, c := range a.Classes {
		names[i] = c.Name
	}
	return names
}

func (a Adaptive) validateClasses() error {
	if len(a.Classes) == 0 {
		if a.DefaultClass != "" {
			return fmt.Errorf("default_class %q names no class (there are none)", a.DefaultClass)
		}
		return nil
	}
	if a.Algorithm == AdaptiveOff {
		return errors.New("classes share the adaptive limit; with algorithm off there is none")
	}
	if len(a.Classes) > 16 {
		return fmt.Errorf("%d classes, at most 16", len(a.Classes))
	}
	total, seen, found := 0.0, map[string]bool{}, false
	for i, c := range a.Classes {
		switch {
		case c.Name == "" || strings.ContainsAny(c.Name, " \t\"\n"):
			return fmt.Errorf("class #%d: name %q: required, without spaces or quotes", i+1, c.Name)
		case seen[c.Name]:
			return fmt.Errorf("class %q: defined twice", c.Name)
		case !(c.Share >= 0 && c.Share <= 1):
			return fmt.Errorf("class %q: share %v is outside [0, 1]", c.Name, c.Share)
		}
		if err := c.Match.validate(); err != nil {
			return fmt.Errorf("class %q: %w", c.Name, err)
		}
		if d := c.Deadline.D(); d < 0 || d > maxDeadline {
			return fmt.Errorf("class %q: deadline %v is outside [0, %v]", c.Name, d, maxDeadline)
		}
		seen[c.Name], total = true, total+c.Share
		found = found || c.Name == a.DefaultClass
	}
	if total > 1+1e-9 {
		return fmt.Errorf("shares sum to %v, more than 1", total)
	}
	if !found {
		return fmt.Errorf("default_class %q names no class", a.DefaultClass)
	}
	return nil
}

func (m Match) validate() error {
	if m.PathPattern != "" {
		if err := checkPattern(m.PathPattern); err != nil {
			return fmt.Errorf("match.path_pattern: %w", err)
		}
	}
	for _, meth := range m.Methods {
		if meth == "" || strings.ToUpper(meth) != meth || strings.ContainsAny(meth, " /") {
			return fmt.Errorf("match.methods: %q is not an upper-case method name", meth)
		}
	}
	for h := range m.RequiredHeaders {
		if h == "" || strings.ContainsAny(h, " :") {
			return fmt.Errorf("match.required_headers: %q is not a header name", h)
		}
	}
	if m.IPSubnet != "" {
		if _, err := ParsePrefix(m.IPSubnet); err != nil {
			return fmt.Errorf("match.ip_subnet: %w", err)
		}
	}
	return nil
}

// checkPattern accepts "/a/*/b" and "/a/**": "**" only as the last segment.
func checkPattern(p string) error {
	if !strings.HasPrefix(p, "/") {
		return fmt.Errorf("%q must start with /", p)
	}
	segs := strings.Split(p[1:], "/")
	for i, s := range segs {
		if strings.Contains(s, "*") && s != "*" && s != "**" {
			return fmt.Errorf("%q: a wildcard must be a whole segment (* or **)", p)
		}
		if s == "**" && i != len(segs)-1 {
			return fmt.Errorf("%q: ** may only be the last segment", p)
		}
	}
	return nil
}

// Policy returns the rule's static policy (the quota as configured; the
// engine widens soft rules). Errors name the field.
func (r *Rule) Policy() (static.Policy, error) {
	alg, err := r.Algorithm.Parse()
	if err != nil {
		return static.Policy{}, fmt.Errorf("algorithm: %w", err)
	}
	p := static.Policy{
		Algorithm: alg, Limit: *r.Limit, Window: r.Window.D(), Burst: r.Burst, Warmup: r.Warmup.D(),
		NoDelay: r.NoDelay, MinInterval: r.MinInterval.D(), CountBlocked: r.CountBlocked, Timeout: r.Timeout.D(),
	}
	if r.WindowSizeSeconds != nil {
		s := *r.WindowSizeSeconds
		if s <= 0 || s > float64(static.MaxWindow/time.Second) || math.IsNaN(s) {
			return static.Policy{}, fmt.Errorf("window_size_seconds: %v out of range", s)
		}
		p.Window = time.Duration(s * float64(time.Second))
	}
	if err := p.Validate(); err != nil {
		return static.Policy{}, err
	}
	return p, nil
}

// validateSharing checks the settings of eventual consistency, gossip and
// regions, and the rules' consistency and scope against them.
func (c *Config) validateSharing() error {
	top := func(field, format string, args ...any) error {
		return fmt.Errorf("%s: %s: %s", c.File, field, fmt.Sprintf(format, args...))
	}
	r := &c.Store.Redis
	if err := r.Consistency.Check(); err != nil {
		return top("store.redis.consistency", "%v", err)
	}
	if d := r.SyncInterval.D(); d < 10*time.Millisecond || d > time.Minute {
		return top("store.redis.sync_interval", "%v is outside [10ms, 1m]", d)
	}
	if r.DenyCacheKeys != nil && (*r.DenyCacheKeys < 0 || *r.DenyCacheKeys > 10_000_000) {
		return top("store.redis.deny_cache_keys", "%d is outside [0, 10000000]", *r.DenyCacheKeys)
	}
	for name, rr := range r.Regions {
		if name == "" {
			return top("store.redis.regions", "a region needs a name")
		}
		if len(rr.Addrs) == 0 {
			return top("store.redis.regions."+name+".addrs", "at least one address is required")
		}
		if err := rr.TLS.Check(); err != nil {
			return top("store.redis.regions."+name+".tls", "%v", err)
		}
	}
	if r.Region != "" {
		if c.Store.Type != StoreRedis {
			return top("store.redis.region", "needs store.type: redis")
		}
		own, ok := r.Regions[r.Region]
		if !ok {
			return top("store.redis.region", "%q is not a key of store.redis.regions", r.Region)
		}
		if !slices.Equal(own.Addrs, r.Addrs) {
			return top("store.redis.addrs", "contradicts store.redis.regions.%s.addrs; leave one of them out", r.Region)
		}
	}
	g := &c.Store.Gossip
	if c.Store.Type == StoreGossip {
		if _, _, err := splitHostPort(g.Bind); err != nil {
			return top("store.gossip.bind", "%v", err)
		}
		for _, j := range g.Join {
			if _, _, err := splitHostPort(j); err != nil {
				return top("store.gossip.join", "%v", err)
			}
		}
		if d := g.SyncInterval.D(); d < 10*time.Millisecond || d > time.Minute {
			return top("store.gossip.sync_interval", "%v is outside [10ms, 1m]", d)
		}
	}
	for i := range c.Rules {
		rule := &c.Rules[i]
		field := func(f string) string { return fmt.Sprintf("rule %q: %s", rule.RuleID, f) }
		if rule.Consistency != "" {
			if err := rule.Consistency.Check(); err != nil {
				return top(field("consistency"), "%v", err)
			}
			if c.Store.Type != StoreRedis {
				return top(field("consistency"), "only a Redis store has consistency modes (store.type is %s)", c.Store.Type)
			}
		}
		if err := rule.Scope.Check(); err != nil {
			return top(field("scope"), "%v", err)
		}
		if rule.Scope == ScopeGlobal {
			if r.Region == "" || c.Store.Type != StoreRedis {
				return top(field("scope"), "global needs store.type: redis with store.redis.region and regions")
			}
			if rule.Algorithm == "concurrency" {
				return top(field("scope"), "global does not apply to concurrency (requests in flight are not a rate to split)")
			}
		}
	}
	return nil
}

// Eventual reports whether rule r's usage is shared eventually (decided
// locally, synced) under c.
func (c *Config) Eventual(r *Rule) bool {
	if c.Store.Type == StoreGossip {
		return true
	}
	if c.Store.Type != StoreRedis {
		return false
	}
	if r.Consistency != "" {
		return r.Consistency == ConsistencyEventual
	}
	return c.Store.Redis.Consistency == ConsistencyEventual
}

// maxDeadline bounds a configured default budget.
const maxDeadline = 24 * time.Hour

func (d Deadlines) validate() error {
	if len(d.From) > 8 {
		return fmt.Errorf("from: %d headers, at most 8", len(d.From))
	}
	for _, h := range d.From {
		if !httpguts.ValidHeaderFieldName(h) {
			return fmt.Errorf("from: %q is not a header name", h)
		}
	}
	if v := d.Default.D(); v < 0 || v > maxDeadline {
		return fmt.Errorf("default: %v is outside [0, %v]", v, maxDeadline)
	}
	if d.Propagate != "" && d.Propagate != "none" && !httpguts.ValidHeaderFieldName(d.Propagate) {
		return fmt.Errorf("propagate: %q is not a header name (or none)", d.Propagate)
	}
	return nil
}
