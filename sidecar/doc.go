// Package sidecar is sluice's HTTP face: the Engine that composes the static
// stores, the adaptive limit and the queue on the request path of DESIGN.md,
// the http.Handler middleware and reverse proxy around it, the response
// headers, the admin server and the Prometheus metrics.
//
// The Engine is the only place where the parts are composed. It takes a
// small Request view, not *http.Request, and returns a Verdict; the
// middleware turns a Verdict into a response or a forwarded request.
package sidecar
