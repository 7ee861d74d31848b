// Package clientlimit is load shedding on the client's side: an
// http.RoundTripper that refuses requests locally while the service is
// refusing them (adaptive throttling, package throttle) and retries
// refused or failed requests within a retry budget, honouring
// Retry-After. With it, clients stop sending most of what an overloaded
// service would refuse anyway, and their retries cannot multiply an
// overload into a retry storm.
package clientlimit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/throttle"
)

// ErrThrottled is the error of a request the client refused itself:
// the service has been refusing most requests lately (see throttle).
var ErrThrottled = errors.New("clientlimit: refused by the client: the service is refusing requests")

// Transport is an http.RoundTripper with adaptive throttling and a retry
// budget. The zero value passes requests through to
// http.DefaultTransport unchanged. Set the fields before the first request
// and do not change them after.
type Transport struct {
	// Base sends the requests; default http.DefaultTransport.
	Base http.RoundTripper
	// Throttle, when set, refuses requests locally (ErrThrottled) in
	// proportion to how many the service refused lately. One Throttle per
	// service called.
	Throttle *throttle.Throttle
	// Budget, when set, allows retries: of overload answers (see
	// Overloaded) and transport errors, for requests that may be sent
	// twice (idempotent methods, or an Idempotency-Key header) and whose
	// body can be sent again. Without it nothing is retried.
	Budget *throttle.RetryBudget
	// MaxRetries bounds the retries of one request; default 2.
	MaxRetries int
	// Backoff is the wait before the first retry, doubled for each next
	// one, with jitter (a random half of it); default 50 ms. A
	// Retry-After longer than it is waited instead.
	Backoff time.Duration
	// MaxRetryAfter is the longest Retry-After waited; an answer asking
	// for longer is returned as it is. Default 10 s.
	MaxRetryAfter time.Duration
	// Overloaded tells an answer that refuses for overload; default 429
	// and 503.
	Overloaded func(*http.Response) bool

	counts
}

// counts are a Transport's or a GRPC's Stats.
type counts struct {
	requests, throttled, retries, exhausted atomic.Uint64
}

// Stats returns the counts so far.
func (c *counts) Stats() Stats {
	return Stats{Requests: c.requests.Load(), Throttled: c.throttled.Load(), Retries: c.retries.Load(),
		BudgetExhausted: c.exhausted.Load()}
}

// retries is a retry policy's numbers, defaults filled in.
type retries struct {
	max              int
	backoff, maxWait time.Duration
}

func retryPolicy(max int, backoff, maxAfter time.Duration) retries {
	if max <= 0 {
		max = 2
	}
	if backoff <= 0 {
		backoff = 50 * time.Millisecond
	}
	if maxAfter <= 0 {
		maxAfter = 10 * time.Second
	}
	return retries{max: max, backoff: backoff, maxWait: maxAfter}
}

// wait returns how long to wait before retry n+1 (the backoff, doubled per
// retry, with jitter, or the service's requested delay after when longer),
// or false when the service asks for longer than MaxRetryAfter or the
// answer would come past ctx's deadline.
func (p retries) wait(ctx context.Context, n int, after time.Duration, asked bool) (time.Duration, bool) {
	w := p.backoff << n
	w = w/2 + rand.N(w/2+1)
	if asked {
		if after > p.maxWait {
			return 0, false
		}
		w = max(w, after)
	}
	if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < w {
		return 0, false
	}
	return w, true
}

// sleep waits d, or until ctx ends (false).
func sleep(ctx context.Context, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// Stats counts what a Transport did since it was made.
type Stats struct {
	// Requests counts requests (not attempts) made through it.
	Requests uint64
	// Throttled counts attempts refused locally (ErrThrottled).
	Throttled uint64
	// Retries counts retries sent; BudgetExhausted the retries the
	// budget refused (the answer or error was returned instead).
	Retries, BudgetExhausted uint64
}

func overloadStatus(r *http.Response) bool {
	return r.StatusCode == http.StatusTooManyRequests || r.StatusCode == http.StatusServiceUnavailable
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	overloaded := t.Overloaded
	if overloaded == nil {
		overloaded = overloadStatus
	}
	policy := retryPolicy(t.MaxRetries, t.Backoff, t.MaxRetryAfter)
	t.requests.Add(1)
	if t.Budget != nil {
		t.Budget.Deposit()
	}
	ctx := req.Context()
	attempt := req
	for n := 0; ; n++ {
		if t.Throttle != nil && !t.Throttle.Allow() {
			t.throttled.Add(1)
			return nil, fmt.Errorf("%s %s: %w", req.Method, req.URL.Redacted(), ErrThrottled)
		}
		resp, err := base.RoundTrip(attempt)
		over := err == nil && overloaded(resp)
		if err == nil && !over && t.Throttle != nil {
			t.Throttle.Accepted()
		}
		if (err == nil && !over) || ctx.Err() != nil || n >= policy.max || t.Budget == nil || !replayable(req) {
			return resp, err
		}
		var after time.Duration
		var asked bool
		if over {
			after, asked = retryAfter(resp)
		}
		wait, ok := policy.wait(ctx, n, after, asked)
		if !ok {
			return resp, err
		}
		if !t.Budget.TryWithdraw() {
			t.exhausted.Add(1)
			return resp, err
		}
		next := req.Clone(ctx)
		if req.GetBody != nil {
			body, berr := req.GetBody()
			if berr != nil {
				return resp, err
			}
			next.Body = body
		}
		if resp != nil {
			// Drain a little so that the connection can be reused.
			_, _ = io.CopyN(io.Discard, resp.Body, 4<<10)
			resp.Body.Close()
		}
		if !sleep(ctx, wait) {
			return nil, ctx.Err()
		}
		t.retries.Add(1)
		attempt = next
	}
}

// replayable reports whether req may be sent again: an idempotent method
// or an Idempotency-Key, and a body that can be read again.
func replayable(req *http.Request) bool {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
	default:
		if req.Header.Get("Idempotency-Key") == "" {
			return false
		}
	}
	return req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
}

// retryAfter reads a Retry-After in seconds or as an HTTP date.
func retryAfter(resp *http.Response) (time.Duration, bool) {
	v := resp.Header.Get("Retry-After")
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseUint(v, 10, 32); err == nil {
		return time.Duration(s) * time.Second, true
	}
	if at, err := http.ParseTime(v); err == nil {
		return max(time.Until(at), 0), true
	}
	return 0, false
}
