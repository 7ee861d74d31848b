// Package sidecar is sluice's HTTP face on net/http: the http.Handler
// middleware around an engine.Engine, the problem+json refusals
// (WriteResponse) and the net/http reverse proxy (NewProxy).
//
// The middleware turns an engine.Verdict into a response or a forwarded
// request; the engine knows nothing of HTTP servers. The rest of the HTTP
// face composes it, one job per package: sidecar/fastproxy (the fast
// engine, on fasthttp), sidecar/admin (the admin port), sidecar/daemon
// (`sluice run`: both engines on one listener, the admin port, reloads)
// and sidecar/sidecarfx (go.uber.org/fx wiring).
package sidecar
