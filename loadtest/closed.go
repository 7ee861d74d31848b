package loadtest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// ClosedOptions configure a closed-loop run: Clients connections, each
// sending its next request as soon as the last one is answered (wrk's and
// hey's model, most benchmarks'), for Duration.
type ClosedOptions struct {
	Target   vegeta.Target
	Clients  int
	Duration time.Duration
	// Timeout bounds each request (default 10s).
	Timeout time.Duration
}

// ClosedSummary is what a closed-loop run saw.
type ClosedSummary struct {
	Clients int `json:"clients"`
	// OK counts 2xx answers; Refused 429 and 503 (a limiter's answers);
	// Failed everything else (other statuses, transport errors).
	OK      int `json:"ok"`
	Refused int `json:"refused"`
	Failed  int `json:"failed"`
	// Elapsed is how long the run took; GoodputRPS is OK per second of it.
	Elapsed    time.Duration `json:"elapsed_ns"`
	GoodputRPS float64       `json:"goodput_rps"`
}

// RunClosed runs a closed loop. It is hand-written (a loop per client over
// one http.Client) because vegeta, which drives the open-loop runs, only
// paces by rate.
func RunClosed(ctx context.Context, o ClosedOptions) (ClosedSummary, error) {
	if o.Clients <= 0 || o.Duration <= 0 {
		return ClosedSummary{}, errors.New("loadtest: a closed loop needs clients and a duration")
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: o.Timeout, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: o.Clients, MaxConnsPerHost: o.Clients,
		IdleConnTimeout: 90 * time.Second, DisableCompression: true,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Timeout: o.Timeout, Transport: tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	ctx, cancel := context.WithTimeout(ctx, o.Duration)
	defer cancel()
	var ok, refused, failed atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range o.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				req, err := http.NewRequestWithContext(ctx, o.Target.Method, o.Target.URL, bytes.NewReader(o.Target.Body))
				if err != nil {
					failed.Add(1)
					return
				}
				req.Header = o.Target.Header.Clone()
				resp, err := client.Do(req)
				if err != nil {
					if ctx.Err() == nil {
						failed.Add(1)
						time.Sleep(time.Millisecond) // a refused connection must not spin
					}
					continue
				}
				_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
				resp.Body.Close()
				switch {
				case resp.StatusCode >= 200 && resp.StatusCode < 300:
					ok.Add(1)
				case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable:
					refused.Add(1)
				default:
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	s := ClosedSummary{Clients: o.Clients, OK: int(ok.Load()), Refused: int(refused.Load()), Failed: int(failed.Load()),
		Elapsed: time.Since(start)}
	s.GoodputRPS = float64(s.OK) / s.Elapsed.Seconds()
	return s, nil
}
