package adaptive_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/queue"
)

// The README's adaptive snippet: a limiter with a wait queue in front.
func Example() {
	serve := func(ctx context.Context) error {
		l, err := adaptive.New(adaptive.Config{Algorithm: &adaptive.Gradient2{}, InitialLimit: 20, MinLimit: 1, MaxLimit: 1000})
		if err != nil {
			return err
		}
		q := queue.New(queue.Config{MaxSize: 100, MaxWait: 500 * time.Millisecond, Order: queue.AdaptiveLIFO, InFlight: l.InFlight},
			l.TryAcquire, func(p adaptive.Permit) { p.Release(sluice.Ignore) })
		l.SetOnRelease(q.Notify)        // a freed slot goes straight to the best waiter
		l.SetClosedLoop(q.ClosedLoop)   // a held closed loop's limit may climb where it costs nothing
		l.SetWaitingLoop(q.WaitingLoop) // and one that waits within MaxSize, where hand-overs cost

		p, err := q.Acquire(ctx, 0) // queue.ErrFull / queue.ErrTimeout / ctx.Err(): shed (503)
		if err != nil {
			return err
		}
		defer p.Release(sluice.Success)                                // or sluice.Dropped on a timeout / 503 / 429, sluice.Ignore on a 4xx
		fmt.Println("spare capacity for elastic rules:", l.Spare(0.8)) // in flight below 80% of the limit
		return nil
	}
	_ = serve(context.Background())
	// Output: spare capacity for elastic rules: true
}
