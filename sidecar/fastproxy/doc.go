// Package fastproxy is the sidecar's fast engine (proxy.engine: fast): the
// reverse proxy on github.com/valyala/fasthttp for HTTP/1.1, with the
// connections that open with HTTP/2's preface (h2c) and upgrade requests
// handed to a net/http server on the same listener. It decides with the
// same engine, and answers with the same responses and headers, as the
// net/http middleware (package sidecar).
package fastproxy
