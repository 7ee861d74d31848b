// Package sidecar is sluice's HTTP face: the http.Handler middleware and
// the reverse proxy around an engine.Engine, the problem+json refusals,
// the admin server (metrics, health, state, reload, check), and Server,
// the daemon of `sluice run`: the configuration file it watches and
// reloads, and the rules source (ZooKeeper) it follows.
//
// The middleware turns an engine.Verdict into a response or a forwarded
// request; the engine knows nothing of HTTP servers.
package sidecar
