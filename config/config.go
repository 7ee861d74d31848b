// Package config is sluice's configuration schema: the YAML (or JSON) file
// the README's configuration reference describes, decoded strictly. An
// unknown key, a bad value or a contradiction is an error that names the
// file, the rule, the field and its line; defaults are filled for
// everything optional. It knows the static
// algorithms (it builds their policies) and nothing of HTTP; every face
// and the engine import it, and it imports no face (docs/ARCHITECTURE.md).
package config

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

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

// Validate reports a block that names a client certificate without its key,
// or the other way round.
func (t *RedisTLS) Validate() error {
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
	// ClosedLoopMaxWait is the longest a request waits while the queue
	// holds a closed loop (a refused client sends again at once, so a
	// refusal frees no room; see queue.Config.ClosedLoopMaxWait); default
	// 1s, at most 1m; at most MaxWait (0 included) keeps MaxWait.
	ClosedLoopMaxWait *Duration `yaml:"closed_loop_max_wait"`
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
	IdentifierType    IdentifierType  `yaml:"identifier_type"`
	Algorithm         StaticAlgorithm `yaml:"algorithm"`
	Limit             *int64          `yaml:"limit"`
	WindowSizeSeconds *float64        `yaml:"window_size_seconds"`
	Window            Duration        `yaml:"window"`
	Burst             int64           `yaml:"burst"`
	Warmup            Duration        `yaml:"warmup"`
	NoDelay           bool            `yaml:"nodelay"`
	MinInterval       Duration        `yaml:"min_interval"`
	CountBlocked      bool            `yaml:"count_blocked"`
	Timeout           Duration        `yaml:"timeout"`
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
	// CostFrom makes each request cost what its response says (a header,
	// a number in a JSON body, the upstream time, the body's bytes; for a
	// descriptor rule the hits of Envoy's call at the stream's end): the
	// request is admitted while the key has quota for the estimate, then
	// charged the actual cost. Nil: a request costs 1 (a descriptor its
	// hits).
	CostFrom *CostFrom `yaml:"cost_from"`
	// CostDefault is charged when the response states no readable cost
	// (no header, bad JSON, a body too large, a client gone); default 1.
	CostDefault *int64 `yaml:"cost_default"`
	// CostEstimate is what admission reserves, corrected at the end: none
	// (1 unit), mean (the rule's recent mean cost) or a number.
	CostEstimate CostEstimate `yaml:"cost_estimate"`
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
