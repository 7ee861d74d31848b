package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/envoyconf"
)

const importUsage = `Usage:
  sluice import envoy-ratelimit [-merge-domains] FILE...

Converts envoyproxy/ratelimit (Lyft ratelimit) configuration files (domain,
nested descriptors, unit/requests_per_unit, unlimited, shadow_mode, name and
replaces, wildcard values) to sluice descriptor rules, written to stdout as
a rules: section. What has no sluice equivalent is refused with a message.
sluice's rls.listen serves them to Envoy; rls.envoy_configs can also load
such files as they are. -merge-domains lets a domain span several files
(the peer's MERGE_DOMAIN_CONFIG).
`

func cmdImport(args []string, stdout, stderr io.Writer) int {
	if len(args) < 2 || args[0] != "envoy-ratelimit" {
		fmt.Fprint(stderr, importUsage)
		return 2
	}
	merge := false
	var files []string
	for _, a := range args[1:] {
		switch {
		case a == "-h" || a == "-help" || a == "--help":
			fmt.Fprint(stdout, importUsage) // asked for: not an error
			return 0
		case a == "-merge-domains" || a == "--merge-domains":
			merge = true
		case strings.HasPrefix(a, "-"):
			fmt.Fprintf(stderr, "sluice import: unknown flag %s\n%s", a, importUsage)
			return 2
		default:
			files = append(files, a)
		}
	}
	if len(files) == 0 {
		fmt.Fprint(stderr, importUsage)
		return 2
	}
	rules, err := envoyconf.LoadMerging(merge, files...)
	if err != nil {
		fmt.Fprintln(stderr, "sluice import:", err)
		return 1
	}
	base, err := config.Parse("(import)", []byte("{}"))
	if err == nil {
		_, err = base.WithRules(rules)
	}
	if err != nil {
		fmt.Fprintln(stderr, "sluice import:", err)
		return 1
	}
	out, err := envoyconf.Marshal(rules)
	if err != nil {
		fmt.Fprintln(stderr, "sluice import:", err)
		return 1
	}
	fmt.Fprintf(stdout, "# sluice rules converted from %v by `sluice import envoy-ratelimit`\n", files)
	_, _ = stdout.Write(out)
	return 0
}
