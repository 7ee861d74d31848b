package redisstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/static"
	"github.com/sluicehq/sluice/static/redisstore"
)

// The README's Redis snippet. (Compiled, not run: it needs a Redis server;
// the tests run the same calls against real ones.)
func ExampleNew() {
	check := func(ctx context.Context, perUser *static.Policy) error {
		client, err := redisstore.NewClient(redisstore.Config{
			Addrs:      []string{"127.0.0.1:6379"}, // one: single node; several: Cluster
			MasterName: "",                         // set: Sentinel (Addrs are the Sentinels)
			Timeout:    50 * time.Millisecond,      // dial/read/write; retries are off
		})
		if err != nil {
			return err
		}
		redis := redisstore.New(client, redisstore.Options{Prefix: "sluice"})
		_ = redis.Load(ctx) // preload the scripts on every master (Check also repairs NOSCRIPT)
		store := static.NewFailover(redis, static.NewMemory(static.MemoryOptions{}), 4 /* sidecars sharing the quota */)

		limits := []static.Limit{{RuleID: "orders", Key: "{user:42}:orders", Policy: perUser, Cost: 1,
			OnError: static.FailLocal}}
		res, err := store.Check(ctx, limits, nil) // res.Fallback != nil when Redis could not decide
		if err != nil {
			return err
		}
		fmt.Println(res.Allowed, res.Fallback)
		return nil
	}
	_ = check
}
