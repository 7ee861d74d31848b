package static_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/static"
)

// The README's library snippet: two limits on one user, checked at once.
func ExampleMemory_Check() {
	check := func(ctx context.Context, userID string) error {
		store := static.NewMemory(static.MemoryOptions{MaxKeys: 1_000_000})
		perUser := &static.Policy{Algorithm: static.SlidingWindow, Limit: 50, Window: time.Minute}
		burst := &static.Policy{Algorithm: static.TokenBucket, Limit: 10, Window: time.Second, Burst: 20}

		limits := []static.Limit{
			{RuleID: "orders_per_user", Key: "orders_per_user:" + userID, Policy: perUser, Cost: 1},
			{RuleID: "orders_burst", Key: "orders_burst:" + userID, Policy: burst, Cost: 1},
		}
		res, err := store.Check(ctx, limits, nil) // all-or-nothing over every limit
		if err != nil {
			return err // the store could not decide: apply the failure policy
		}
		if !res.Allowed {
			fmt.Println("429, retry after", res.RetryAfter, "rule", res.RuleID)
			return nil
		}
		taken := static.Reserved(store, limits, res) // one handle for what the check took
		if err := taken.Wait(ctx); err != nil {
			return err // the client left while paced; what it took was given back
		}
		defer taken.Done(sluice.Success)
		fmt.Println("allowed; tightest rule", res.RuleID, "remaining", res.Remaining)
		return nil
	}
	_ = check(context.Background(), "42")
	// Output: allowed; tightest rule orders_burst remaining 19
}
