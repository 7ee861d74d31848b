package queue_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/queue"
)

// BenchmarkQueue measures a request that must wait: with 2 slots shared by
// all goroutines, most acquisitions enqueue, are handed a slot by a release,
// and dequeue.
func BenchmarkQueue(b *testing.B) {
	for _, order := range []queue.Order{queue.FIFO, queue.AdaptiveLIFO} {
		b.Run("enqueue_dequeue/"+order.String(), func(b *testing.B) {
			s, q := newQueue(2, queue.Config{MaxSize: 1024, MaxWait: time.Minute, Order: order})
			ctx := context.Background()
			b.ReportAllocs()
			b.SetParallelism(4)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					p, err := q.Acquire(ctx, 0)
					if errors.Is(err, queue.ErrTimeout) && order == queue.AdaptiveLIFO {
						continue // CoDel dropped a waiter of the standing queue: part of the order
					}
					if err != nil {
						b.Error(err)
						return
					}
					s.release(p)
				}
			})
		})
	}
	b.Run("enqueue_dequeue/fair_64_tenants", func(b *testing.B) {
		s, q := newQueue(2, queue.Config{MaxSize: 1024, MaxWait: time.Minute, Order: queue.FIFO, Fair: true})
		ctx := context.Background()
		b.ReportAllocs()
		b.SetParallelism(4)
		var next atomic.Uint64
		b.RunParallel(func(pb *testing.PB) {
			tenant := next.Add(1)
			for pb.Next() {
				p, err := q.AcquireAs(ctx, 0, tenant%64)
				if err != nil {
					b.Error(err)
					return
				}
				s.release(p)
				tenant += 7
			}
		})
	})
	b.Run("fast_path", func(b *testing.B) {
		s, q := newQueue(1, queue.Config{})
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			p, _ := q.Acquire(ctx, 0)
			s.release(p)
		}
	})
}
