package queue

// loopWatch tells the limiter of a closed loop that the queue never
// refuses: clients that send again only once answered (wrk -c64), fewer
// than MaxSize, wait in the queue losing nothing, and the loop they make
// (waiters and requests in flight) does not grow. No hold test runs for
// them (one runs only for a level that sheds), and the level may never
// stand for the growth watch (the queue drains for a moment whenever a few
// of the loop's clients are on their way back), yet they too wait as long
// in the queue as in the service, and every slot is handed over to them
// one at a time: wrk -c64 before a service that answers at once held the
// limit at 4-5 with 60 waiting for 5 s, 15% of the proxy's throughput
// lost to the hand-overs.
//
// It measures spans of one interval: a span in which something waited
// for at least three quarters of it (a load under the limit queues now
// and then, in its bursts: at 0.8x, a third of the time), nothing was
// lost (dropped, timed out, refused for lack of room) and the loop stayed
// within a closed loop's jitter (within) of the smallest it was since the
// run of such spans began counts; anything else ends the run. After
// loopSpans of them the level reads as a closed loop (loopLike). An open
// loop that queues that long without loss or growth arrives at what the
// limit serves: a higher limit serves it as well, and up-probes judged as
// a closed loop's keep only what costs no goodput. An overload loses
// waiters or grows, and ends the run at once.
type loopWatch struct {
	at     int64  // when the current span began (Unix ns); 0: none yet
	lost   uint64 // the level's lost then
	last   int64  // the latest note (Unix ns)
	length int    // ... and the level's length after it
	waited int64  // ns of the span something waited
	held   int    // the smallest loop since the run began
	spans  int    // spans in the run
}

// loopSpans is how many spans in a row make a closed loop: a slow-growing
// open loop (2x a 5-slot service, 6 waiters an interval) grows past a
// loop of 20's jitter within three.
const loopSpans = 5

// note updates the watch at now, the level being length long with a loop
// of size (see level.size) and lost waiters lost ever. Called on every
// arrival and serve of an adaptive LIFO queue's level (after it), with the
// queue's lock held.
func (w *loopWatch) note(now, interval int64, length, size int, lost uint64) {
	if w.length > 0 && now > w.last {
		w.waited += now - w.last // w.last is never before the span's start
	}
	w.last, w.length = now, length
	if w.at == 0 {
		w.at, w.lost, w.held = now, lost, size
		return
	}
	if now-w.at < interval {
		return
	}
	if 4*w.waited >= 3*(now-w.at) && lost == w.lost && within(size, w.held) && now-w.at < 4*interval {
		w.spans++
		w.held = min(w.held, size)
	} else {
		w.spans, w.held = 0, size
	}
	w.at, w.lost, w.waited = now, lost, 0
}

// noteLoop notes the level on its loopWatch at now, inflight being the
// limiter's requests in flight. Called with the queue's lock held.
func (lv *level[P]) noteLoop(now, interval int64, inflight int) {
	lv.loop.note(now, interval, lv.length, lv.size(inflight), lv.lost)
}

// loopLike reports whether the watch found a closed loop.
func (w *loopWatch) loopLike() bool { return w.spans >= loopSpans }
