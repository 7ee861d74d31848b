// Package engine is sluice's decision engine, below every face: it
// composes the static stores, the adaptive limit, the priority classes and
// the wait queue on the request path of docs/ARCHITECTURE.md (identify, match, one
// static check for all matching rules, throttling modes, delay, adaptive
// gate), keeps the rules (swapped atomically on reload, counters kept for
// unchanged rules), and exposes its state and Prometheus metrics.
//
// Faces call it and never each other: the HTTP proxy, middleware and admin
// port (sidecar and the packages under it), Envoy's rate limit service (package rls, through
// CheckDescriptors) and the gRPC interceptors (package grpclimit). The
// engine takes a small Request view (method, path, peer address, a header
// lookup), not *http.Request, and returns a Verdict with the quota headers
// to write.
package engine
