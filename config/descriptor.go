package config

import (
	"errors"
	"fmt"
	"strings"
)

// Descriptor is an Envoy rate limit descriptor a rule applies to: a domain
// and a list of entries, as in envoyproxy/ratelimit's configuration. An
// entry with a value matches only that value; one without matches any
// value of its key, and the rule then keys its counter by the value (one
// quota per remote address, say). A value with "*" is a pattern: each "*"
// matches any run of characters, anywhere in the value ("foo*",
// "/api*v1"); each matching value has its own counter, or, with
// share_threshold, all share the pattern's. Where several rules could
// apply, the lookup is envoyproxy/ratelimit's: entry by entry, an exact
// value first, then the first pattern that matches (in configuration
// order), then any value.
type Descriptor struct {
	// Domain is the rate limit domain Envoy names in each request.
	Domain string `yaml:"domain"`
	// Entries are matched in order against a descriptor's entries; a
	// descriptor matches only with exactly as many entries.
	Entries []DescriptorEntry `yaml:"entries"`
	// Unlimited marks descriptors that are never limited (the rule has no
	// algorithm or limit): a more exact match that lifts a wider rule.
	Unlimited bool `yaml:"unlimited"`
	// EnvoyCompatible answers as envoyproxy/ratelimit does (set on rules
	// imported from its files): current_limit.name only from Name,
	// duration_until_reset in whole seconds, and no response headers
	// unless another rule of the call asks for sluice's answers.
	EnvoyCompatible bool `yaml:"envoy_compatible"`
	// Name is the peer's rate_limit name, reported as current_limit.name
	// in the Envoy-compatible answer.
	Name string `yaml:"name"`
	// QuotaMode (the peer's quota_mode): the descriptor's status is
	// OVER_LIMIT past the limit, but the answer is OVER_LIMIT only when
	// every quota-mode descriptor of the call is over (or another,
	// ordinary, one is).
	QuotaMode bool `yaml:"quota_mode"`
	// Metadata (the peer's descriptor metadata) is merged into the
	// answer's dynamic metadata when the descriptor passes and
	// rls.response_dynamic_metadata is on.
	Metadata map[string]any `yaml:"metadata"`
	// DetailedMetric (the peer's detailed_metric) labels this rule's
	// envoyproxy/ratelimit metrics with the request's values (key_value)
	// instead of the configured ones, a series per pair of values (a
	// value over 64 bytes labelled by its digest; at most MaxMetricSeries
	// per rule, later pairs counted under the configured labels).
	DetailedMetric bool `yaml:"detailed_metric"`
}

// MaxMetricSeries bounds the series one rule's detailed_metric or
// value_to_metric labels may add, whatever values clients send.
const MaxMetricSeries = 1000

// DescriptorEntry is one key (and optional value) of a Descriptor.
type DescriptorEntry struct {
	Key   string `yaml:"key"`
	Value string `yaml:"value"`
	// ShareThreshold, for a value with "*", makes every value the pattern
	// matches count on one counter (envoyproxy/ratelimit's share_threshold).
	ShareThreshold bool `yaml:"share_threshold"`
	// ValueToMetric (the peer's value_to_metric) labels this entry in the
	// envoyproxy/ratelimit metrics with the request's value (key_value)
	// where the configured key or pattern would (bounded as
	// DetailedMetric's series are).
	ValueToMetric bool `yaml:"value_to_metric"`
}

// MaxDescriptorEntries bounds a descriptor's entries.
const MaxDescriptorEntries = 16

func (d *Descriptor) validate() error {
	if d.Domain == "" {
		return errors.New("domain: required")
	}
	if len(d.Entries) == 0 || len(d.Entries) > MaxDescriptorEntries {
		return fmt.Errorf("entries: %d entries, want 1 to %d", len(d.Entries), MaxDescriptorEntries)
	}
	for i, e := range d.Entries {
		if e.Key == "" {
			return fmt.Errorf("entries[%d].key: required", i)
		}
		if e.ShareThreshold && !strings.Contains(e.Value, "*") {
			return fmt.Errorf("entries[%d].share_threshold: only for a value with a wildcard (\"*\"), not %q", i, e.Value)
		}
	}
	return nil
}

// RLS configures Envoy's rate limit service (envoy.service.ratelimit.v3),
// served over gRPC beside the proxy.
type RLS struct {
	// Listen is the gRPC address, e.g. 127.0.0.1:8081, or a unix socket,
	// unix:/run/sluice/rls.sock; "" serves none.
	Listen string `yaml:"listen"`
	// TLS, when set, serves gRPC over TLS (with ClientCAFile: mutual TLS,
	// every client must present a certificate that CA signed).
	TLS *TLS `yaml:"tls"`
	// EnvoyConfigs are envoyproxy/ratelimit configuration files (domain,
	// descriptors) whose limits are loaded as descriptor rules beside the
	// file's rules, so that a deployment switches without rewriting them.
	// A relative path is relative to the configuration file; the files
	// are read at start and at every reload.
	EnvoyConfigs []string `yaml:"envoy_configs"`
	// ResponseDynamicMetadata adds to each answer the peer's dynamic
	// metadata: the domain, the descriptors' entries, hits_addend, and the
	// metadata of the descriptors that passed (envoyproxy/ratelimit's
	// RESPONSE_DYNAMIC_METADATA).
	ResponseDynamicMetadata bool `yaml:"response_dynamic_metadata"`
	// MergeDomains lets one domain span several EnvoyConfigs files, their
	// descriptors adding up (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG);
	// without it a domain in two files is an error.
	MergeDomains bool `yaml:"merge_domains"`
	// NearLimitRatio is the share of a descriptor rule's limit past which
	// admitted hits count as near_limit in the envoyproxy/ratelimit metrics
	// (its NEAR_LIMIT_RATIO); default 0.8, within (0, 1].
	NearLimitRatio float64 `yaml:"near_limit_ratio"`
}

// TLS is a listener's certificate and, for mutual TLS, the CA its clients'
// certificates must chain to. Paths are relative to the configuration
// file.
type TLS struct {
	CertFile     string `yaml:"cert_file"`
	KeyFile      string `yaml:"key_file"`
	ClientCAFile string `yaml:"client_ca_file"`
}
