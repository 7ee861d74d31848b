package sidecar

import "github.com/prometheus/client_golang/prometheus"

// RequestsVec exposes sluice_requests_total to the tests.
func RequestsVec(e *Engine) *prometheus.CounterVec { return e.metrics.requests }
