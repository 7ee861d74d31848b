package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/zkrules"
)

const rulesUsage = `Usage:
  sluice rules push -zookeeper HOST:PORT[,HOST:PORT...] [-path P] [-dry-run]
                    [-auth-file F [-readers-auth-file R]] FILE
  sluice rules list -zookeeper HOST:PORT[,HOST:PORT...] [-path P] [-auth-file F]

push makes the znodes under P (one child per rule, named by its rule_id, the
rule as JSON) match the rules of FILE, in one atomic multi-operation: it
creates the new rules, sets the changed ones and deletes the others. Every
sidecar watching P applies the new set. list shows the znodes and whether
each is a valid rule.

With -auth-file (a file holding user:password) the session authenticates
with that digest identity, and the znodes push creates may be changed by it
alone; they stay readable by anyone, or only by the identity of
-readers-auth-file (give the sidecars that one in
rules_source.zookeeper.auth_file). Existing znodes keep their ACLs.
`

func cmdRules(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "push" && args[0] != "list") {
		fmt.Fprint(stderr, rulesUsage)
		return 2
	}
	sub := args[0]
	fs := flag.NewFlagSet("rules "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	servers := fs.String("zookeeper", "", "ZooKeeper servers, comma separated")
	parent := fs.String("path", config.DefaultZooKeeperPath, "parent znode of the rules")
	timeout := fs.Duration("timeout", 10*time.Second, "how long to wait for a ZooKeeper session")
	authFile := fs.String("auth-file", "", "a file holding user:password: authenticate with that digest identity")
	dry, readersFile := new(bool), new(string)
	if sub == "push" { // list does not take push's flags (nor show them in its -h)
		fs.BoolVar(dry, "dry-run", false, "print the changes, write nothing")
		fs.StringVar(readersFile, "readers-auth-file", "", "a file holding user:password: only that identity may read the znodes created")
	}
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if *servers == "" {
		fmt.Fprintf(stderr, "sluice rules %s: -zookeeper is required\n\n%s", sub, rulesUsage)
		return 2
	}
	if err := config.CheckZNodePath(*parent); err != nil {
		fmt.Fprintf(stderr, "sluice rules %s: -path: %v\n", sub, err)
		return 2
	}
	var rules map[string][]byte
	if sub == "push" {
		if fs.NArg() != 1 {
			fmt.Fprintf(stderr, "sluice rules push: one rules FILE is required\n\n%s", rulesUsage)
			return 2
		}
		data, err := os.ReadFile(fs.Arg(0))
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		if rules, err = config.RulesJSON(fs.Arg(0), data); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
	}
	var auth, readers *zkrules.Auth
	var err error
	if *authFile != "" {
		if auth, err = zkrules.LoadAuth(*authFile); err != nil {
			fmt.Fprintf(stderr, "sluice rules %s: -auth-file: %v\n", sub, err)
			return 2
		}
	}
	if *readersFile != "" {
		if sub != "push" || auth == nil {
			fmt.Fprintf(stderr, "sluice rules %s: -readers-auth-file needs push and -auth-file\n", sub)
			return 2
		}
		if readers, err = zkrules.LoadAuth(*readersFile); err != nil {
			fmt.Fprintf(stderr, "sluice rules push: -readers-auth-file: %v\n", err)
			return 2
		}
	}
	c, err := zkrules.Dial(strings.Split(*servers, ","), *parent, *timeout, auth, readers)
	if err != nil {
		fmt.Fprintln(stderr, "sluice rules:", err)
		return 1
	}
	defer c.Close()
	if sub == "list" {
		entries, err := c.List()
		if err != nil {
			fmt.Fprintln(stderr, "sluice rules list:", err)
			return 1
		}
		bad := 0
		for _, e := range entries {
			status := "ok"
			if e.Err != nil {
				status, bad = "INVALID: "+e.Err.Error(), bad+1
			}
			fmt.Fprintf(stdout, "%s\tversion %d\t%s\n\t%s\n", e.ZNode, e.Version, status, e.Data)
		}
		fmt.Fprintf(stdout, "%d rules under %s, %d invalid\n", len(entries), *parent, bad)
		if bad > 0 {
			return 1
		}
		return 0
	}
	changes, err := c.Push(rules, *dry)
	if err != nil {
		fmt.Fprintln(stderr, "sluice rules push:", err)
		return 1
	}
	for _, ch := range changes {
		fmt.Fprintf(stdout, "%s\t%s\n", ch.Op, ch.RuleID)
	}
	verb := "pushed"
	if *dry {
		verb = "would push"
	}
	fmt.Fprintf(stdout, "%s %d changes to %s (%d rules)\n", verb, len(changes), *parent, len(rules))
	return 0
}
