package clientlimit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/clientlimit"
	"github.com/sluicehq/sluice/throttle"
)

// server answers with the status code of answer(hit), hit counting from 1.
func server(t *testing.T, answer func(hit int64, r *http.Request, w http.ResponseWriter) int) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(answer(hits.Add(1), r, w))
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

func get(t *testing.T, c *http.Client, ctx context.Context, url string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return resp, err
}

// TestThrottledClientSparesARefusingService: against a service that
// refuses everything with 503, a client with adaptive throttling sends
// only a few of its requests (the rest fail at once with ErrThrottled);
// without it, every one reaches the service.
func TestThrottledClientSparesARefusingService(t *testing.T) {
	for _, withThrottle := range []bool{false, true} {
		srv, hits := server(t, func(int64, *http.Request, http.ResponseWriter) int { return http.StatusServiceUnavailable })
		tr := &clientlimit.Transport{}
		if withThrottle {
			// A fixed seed: with all refused, the throttle sends each next
			// request with a falling chance, and about one run in a few
			// hundred sent only the first (CI saw 1 of 300).
			tr.Throttle = throttle.New(throttle.Config{Rand: rand.New(rand.NewPCG(1, 2)).Float64})
		}
		c := &http.Client{Transport: tr}
		local := 0
		for range 300 {
			_, err := get(t, c, context.Background(), srv.URL)
			if errors.Is(err, clientlimit.ErrThrottled) {
				local++
			} else if err != nil {
				t.Fatal(err)
			}
		}
		switch n := hits.Load(); {
		case !withThrottle && n != 300:
			t.Errorf("without throttling %d of 300 reached the service", n)
		case withThrottle && (n > 100 || n < 2):
			t.Errorf("with throttling %d of 300 reached a service refusing all, want a few (2-100)", n)
		case withThrottle && int(n)+local != 300 || uint64(local) != tr.Stats().Throttled:
			t.Errorf("%d sent + %d refused locally (stats %+v), want 300", n, local, tr.Stats())
		}
	}
}

// TestRetriesStayWithinTheBudget: against a service that refuses every
// other request, retries are sent only within the budget (20% of first
// tries here, no reserve), and each retry is a new attempt that may
// succeed.
func TestRetriesStayWithinTheBudget(t *testing.T) {
	srv, hits := server(t, func(hit int64, _ *http.Request, _ http.ResponseWriter) int {
		if hit%2 == 0 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	tr := &clientlimit.Transport{Budget: throttle.NewRetryBudget(throttle.BudgetConfig{Ratio: 0.2, MinPerSecond: -1}),
		Backoff: time.Millisecond}
	c := &http.Client{Transport: tr}
	ok := 0
	for range 100 {
		resp, err := get(t, c, context.Background(), srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode == http.StatusOK {
			ok++
		}
	}
	st := tr.Stats()
	if st.Retries == 0 || st.Retries > 20 || hits.Load() != int64(100+st.Retries) {
		t.Fatalf("stats %+v, %d hits: want 1-20 retries (20%% of 100), each one hit", st, hits.Load())
	}
	if st.BudgetExhausted == 0 {
		t.Errorf("stats %+v: with half the answers refused, the budget should have run out", st)
	}
	if ok <= 50 {
		t.Errorf("%d of 100 succeeded, want retries to add to the 50 the service served at first", ok)
	}
}

// TestRetryAfterAndDeadlines: a Retry-After longer than MaxRetryAfter, or
// than the request's deadline leaves, is not waited: the answer comes back
// at once, with one hit.
func TestRetryAfterAndDeadlines(t *testing.T) {
	for _, c := range []struct {
		name, after string
		timeout     time.Duration
	}{
		{"past MaxRetryAfter", "30", 0},
		{"past the deadline", "2", 500 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv, hits := server(t, func(_ int64, _ *http.Request, w http.ResponseWriter) int {
				w.Header().Set("Retry-After", c.after)
				return http.StatusTooManyRequests
			})
			tr := &clientlimit.Transport{Budget: throttle.NewRetryBudget(throttle.BudgetConfig{})}
			ctx := context.Background()
			if c.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, c.timeout)
				defer cancel()
			}
			resp, err := get(t, &http.Client{Transport: tr}, ctx, srv.URL)
			if err != nil || resp.StatusCode != http.StatusTooManyRequests || hits.Load() != 1 || tr.Stats().Retries != 0 {
				t.Fatalf("status %v, error %v, %d hits, stats %+v: want the 429 back with one hit", resp, err, hits.Load(), tr.Stats())
			}
		})
	}
}

// TestOnlyReplayableRequestsAreRetried: a POST is retried only with an
// Idempotency-Key, and then with its whole body again.
func TestOnlyReplayableRequestsAreRetried(t *testing.T) {
	var bodies []string
	srv, hits := server(t, func(hit int64, r *http.Request, _ http.ResponseWriter) int {
		b, _ := io.ReadAll(r.Body)
		bodies = append(bodies, string(b))
		if hit == 1 || hit == 2 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	tr := &clientlimit.Transport{Budget: throttle.NewRetryBudget(throttle.BudgetConfig{}), Backoff: time.Millisecond}
	c := &http.Client{Transport: tr}
	post := func(key string) int {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("order=42"))
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post(""); code != http.StatusServiceUnavailable || hits.Load() != 1 {
		t.Fatalf("a POST without an Idempotency-Key: %d after %d hits, want the 503 and no retry", code, hits.Load())
	}
	if code := post("k1"); code != http.StatusOK || hits.Load() != 3 {
		t.Fatalf("a POST with an Idempotency-Key: %d after %d hits, want 200 on its retry", code, hits.Load())
	}
	if bodies[2] != "order=42" {
		t.Errorf("the retry sent body %q, want the whole body again", bodies[2])
	}
}

// TestCollector: the counts reach Prometheus under the client's label.
func TestCollector(t *testing.T) {
	srv, _ := server(t, func(int64, *http.Request, http.ResponseWriter) int { return http.StatusServiceUnavailable })
	th := throttle.New(throttle.Config{})
	tr := &clientlimit.Transport{Throttle: th}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(clientlimit.Collector("orders", tr, th))
	c := &http.Client{Transport: tr}
	for range 50 {
		_, _ = get(t, c, context.Background(), srv.URL)
	}
	got, err := testutil.GatherAndCount(reg, "sluice_client_requests_total", "sluice_client_throttled_total", "sluice_client_throttle_probability")
	if err != nil || got != 3 {
		t.Fatalf("%d series, %v", got, err)
	}
	want := fmt.Sprintf(`
# HELP sluice_client_throttled_total Attempts the client refused itself while the service was refusing (adaptive throttling).
# TYPE sluice_client_throttled_total counter
sluice_client_throttled_total{client="orders"} %d
`, tr.Stats().Throttled)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sluice_client_throttled_total"); err != nil || tr.Stats().Throttled == 0 {
		t.Errorf("%v (stats %+v)", err, tr.Stats())
	}
}
