package clientlimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/sluicehq/sluice/clientlimit"
	"github.com/sluicehq/sluice/throttle"
)

// A client that backs off by itself: it refuses locally while the service
// refuses (adaptive throttling) and retries at most 10% of its requests
// (plus 10 a second), waiting out Retry-After.
func ExampleTransport() {
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	defer svc.Close()

	client := &http.Client{Transport: &clientlimit.Transport{
		Throttle: throttle.New(throttle.Config{}),                  // K = 2 over 2 minutes
		Budget:   throttle.NewRetryBudget(throttle.BudgetConfig{}), // 10% + 10/s over 10 s
	}}
	resp, err := client.Get(svc.URL)
	if err != nil {
		fmt.Println(err) // errors.Is(err, clientlimit.ErrThrottled) when refused locally
		return
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode)
	// Output: 200
}
