package main

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"time"
)

// cmdHealth asks a running sidecar's admin port whether it is ready
// (/readyz) or, with -live, alive (/healthz): exit 0 if so, 1 if not. For
// images without curl (the container's HEALTHCHECK) and scripts.
func cmdHealth(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("health", flag.ContinueOnError)
	fs.SetOutput(stderr)
	admin := fs.String("admin", "127.0.0.1:9901", "the sidecar's admin address")
	live := fs.Bool("live", false, "ask /healthz (the process runs) instead of /readyz (rules loaded, store answered)")
	timeout := fs.Duration("timeout", 2*time.Second, "how long to wait for the answer")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	path := "/readyz"
	if *live {
		path = "/healthz"
	}
	client := &http.Client{Timeout: *timeout}
	resp, err := client.Get("http://" + *admin + path)
	if err != nil {
		fmt.Fprintln(stderr, "sluice health:", err)
		return 1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "sluice health: %s: %d %s", path, resp.StatusCode, body)
		return 1
	}
	fmt.Fprintf(stdout, "%s", body)
	return 0
}
