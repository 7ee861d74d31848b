// Package redisbus is a fleet.Transport over one Redis stream: every sidecar
// appends its batch (XADD) and reads the others' since its last read
// (XREAD), both in one pipelined round trip per sync, however many keys the
// batch holds. The stream is trimmed to the last minute (MINID), so a
// sidecar that starts (or comes back) absorbs the fleet's usage of the last
// minute and no more.
package redisbus

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/static/fleet"
)

// Retention is how long the stream keeps batches.
const Retention = time.Minute

// heartbeat is how often a sidecar with nothing to report still appends an
// empty batch, so that the others see it alive.
const heartbeat = time.Second

// readCount is how many entries one XREAD returns at most; a sync reads at
// most maxReads times that.
const (
	readCount = 1000
	maxReads  = 20
)

// Bus is a fleet.Transport over a Redis stream. It is meant for one
// fleet.Store, which serializes its calls.
type Bus struct {
	client  redis.UniversalClient
	key     string
	timeout time.Duration
	dec     fleet.Decoder
	last    string // the last stream id read
	lastPut time.Time
	buf     []byte
}

// New returns a Bus on the stream "<prefix>:{fleet}". timeout bounds each
// round trip (default a second).
func New(client redis.UniversalClient, prefix string, timeout time.Duration) *Bus {
	if timeout <= 0 {
		timeout = time.Second
	}
	return &Bus{client: client, key: prefix + ":{fleet}", timeout: timeout}
}

// Exchange implements fleet.Transport.
func (b *Bus) Exchange(ctx context.Context, out fleet.Batch) ([]fleet.Batch, error) {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	if b.last == "" {
		// Start from what the stream still holds of the last minute.
		b.last = strconv.FormatInt(out.Sent.Add(-Retention).UnixMilli(), 10) + "-0"
	}
	put := len(out.Usages) > 0 || out.Sent.Sub(b.lastPut) >= heartbeat
	pipe := b.client.Pipeline()
	if put {
		b.buf = fleet.Encode(b.buf[:0], &out)
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: b.key, MinID: strconv.FormatInt(out.Sent.Add(-Retention).UnixMilli(), 10),
			Approx: true, Values: []any{"b", b.buf}})
	}
	read := pipe.XRead(ctx, &redis.XReadArgs{Streams: []string{b.key, b.last}, Count: readCount, Block: -1})
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return nil, fmt.Errorf("redisbus: %w", err)
	}
	if put {
		b.lastPut = out.Sent
	}
	var in []fleet.Batch
	streams, _ := read.Result()
	for range maxReads {
		n := 0
		for _, st := range streams {
			for _, msg := range st.Messages {
				n++
				b.last = msg.ID
				raw, _ := msg.Values["b"].(string)
				batch, err := b.dec.Decode([]byte(raw))
				if err != nil || batch.Node == out.Node {
					continue // a foreign or malformed entry is skipped, never trusted
				}
				in = append(in, batch)
			}
		}
		if n < readCount {
			break
		}
		var err error
		streams, err = b.client.XRead(ctx, &redis.XReadArgs{Streams: []string{b.key, b.last}, Count: readCount, Block: -1}).Result()
		if err != nil {
			if err == redis.Nil {
				break
			}
			return in, nil // what was read counts; the rest comes next time
		}
	}
	return in, nil
}
