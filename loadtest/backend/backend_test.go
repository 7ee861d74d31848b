package backend

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// fakeTime makes b wait with time.Sleep, which a testing/synctest bubble
// runs on its fake clock (the precise sleeper waits on the real one).
func fakeTime(b *Backend, err error) (*Backend, error) {
	if b != nil {
		b.sleep = time.Sleep
	}
	return b, err
}

// sendInTurn sends n requests to b, inside a synctest bubble, each
// arriving (and queueing) before the next; done holds when each finished,
// once wait returns.
func sendInTurn(b *Backend, n int) (done []time.Time, wait func()) {
	done = make([]time.Time, n)
	var wg sync.WaitGroup
	for i := range done {
		wg.Add(1)
		go serve(b, context.Background(), &done[i], &wg)
		synctest.Wait()
	}
	return done, wg.Wait
}

// serve runs one request through b at the bubble's current time and
// records when it finished (zero when it was dropped).
func serve(b *Backend, ctx context.Context, done *time.Time, wg *sync.WaitGroup) {
	defer wg.Done()
	r := httptest.NewRequestWithContext(ctx, "GET", "/work", nil)
	w := httptest.NewRecorder()
	b.ServeHTTP(w, r)
	if w.Code == 200 && strings.HasPrefix(w.Body.String(), "served") {
		*done = time.Now()
	}
}

// TestSlotsQueueInOrder: with 2 slots and 10 ms of service, 5 requests at
// once finish at 10, 10, 20, 20 and 30 ms: capacity is slots/service and
// the rest wait in line.
func TestSlotsQueueInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := fakeTime(New(Model{Slots: 2, ServiceTime: 10 * time.Millisecond}, 1))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		done, wait := sendInTurn(b, 5)
		if s := b.Stats(); s.Busy != 2 || s.Waiting != 3 {
			t.Fatalf("stats %+v, want 2 busy and 3 waiting", s)
		}
		wait()
		want := []time.Duration{10, 10, 20, 20, 30}
		for i, d := range done {
			if got := d.Sub(start); got != want[i]*time.Millisecond {
				t.Errorf("request %d finished at %v, want %v", i, got, want[i]*time.Millisecond)
			}
		}
		if s := b.Stats(); s.Served != 5 || s.Busy != 0 || s.Waiting != 0 {
			t.Fatalf("stats %+v", s)
		}
	})
}

// TestClientLeavingDropsQueuedRequest: a request whose client leaves while
// it waits is dropped, never served, and the next in line takes its place.
func TestClientLeavingDropsQueuedRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := fakeTime(New(Model{Slots: 1, ServiceTime: 10 * time.Millisecond}, 1))
		start := time.Now()
		var wg sync.WaitGroup
		var first, leaver, third time.Time
		ctx, leave := context.WithCancel(context.Background())
		wg.Add(3)
		go serve(b, context.Background(), &first, &wg)
		synctest.Wait()
		go serve(b, ctx, &leaver, &wg)
		synctest.Wait()
		go serve(b, context.Background(), &third, &wg)
		synctest.Wait()
		leave()
		wg.Wait()
		if !leaver.IsZero() {
			t.Fatal("a request whose client left was served")
		}
		if got := third.Sub(start); got != 20*time.Millisecond {
			t.Fatalf("third finished at %v, want 20ms (the leaver's place was freed)", got)
		}
		if s := b.Stats(); s.Served != 2 || s.Dropped != 1 {
			t.Fatalf("stats %+v, want 2 served, 1 dropped", s)
		}
	})
}

// TestDegradeSlowsServiceUnderBacklog: with Degrade, service time grows
// with the requests waiting per slot.
func TestDegradeSlowsServiceUnderBacklog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := fakeTime(New(Model{Slots: 1, ServiceTime: 10 * time.Millisecond, Degrade: 0.5}, 1))
		start := time.Now()
		done := make([]time.Time, 3)
		var wg sync.WaitGroup
		for i := range done {
			wg.Add(1)
			go serve(b, context.Background(), &done[i], &wg)
			synctest.Wait()
		}
		wg.Wait()
		// First: nothing waiting, 10 ms. Second starts with one waiting
		// behind it: 15 ms. Third: none waiting, 10 ms.
		want := []time.Duration{10, 25, 35}
		for i, d := range done {
			if got := d.Sub(start); got != want[i]*time.Millisecond {
				t.Errorf("request %d finished at %v, want %v", i, got, want[i]*time.Millisecond)
			}
		}
	})
}

// TestControl changes the model while it runs and rejects bad values.
func TestControl(t *testing.T) {
	b, _ := New(Model{Slots: 2, ServiceTime: 20 * time.Millisecond, Sigma: 0.25}, 1)
	do := func(method, body string) (int, string) {
		r := httptest.NewRequest(method, "/control", strings.NewReader(body))
		w := httptest.NewRecorder()
		b.ServeHTTP(w, r)
		return w.Code, w.Body.String()
	}
	if code, body := do("GET", ""); code != 200 || !strings.Contains(body, `"capacity_rps": 100`) {
		t.Fatalf("GET: %d %s", code, body)
	}
	if code, body := do("POST", `{"slots": 8, "service_ms": 5}`); code != 200 || !strings.Contains(body, `"slots": 8`) {
		t.Fatalf("POST: %d %s", code, body)
	}
	if m := b.Model(); m.Slots != 8 || m.ServiceTime != 5*time.Millisecond || m.Sigma != 0.25 {
		t.Fatalf("model %+v", m)
	}
	for _, bad := range []string{`{"slots": 0}`, `{"service_ms": -1}`, `{"sigma": 9}`, `{"nope": 1}`, `{`} {
		if code, _ := do("POST", bad); code != 400 {
			t.Errorf("%s: status %d, want 400", bad, code)
		}
	}
	if code, _ := do("DELETE", ""); code != http.StatusMethodNotAllowed {
		t.Errorf("DELETE: %d", code)
	}
	if m := b.Model(); m.Slots != 8 {
		t.Fatalf("a rejected change applied: %+v", m)
	}
}

// TestLognormalMean: service times average ServiceTime.
func TestLognormalMean(t *testing.T) {
	b, _ := New(Model{Slots: 1, ServiceTime: 20 * time.Millisecond, Sigma: 0.5}, 7)
	var sum time.Duration
	const n = 20000
	for range n {
		b.mu.Lock()
		sum += b.serviceTimeLocked()
		b.mu.Unlock()
	}
	mean := sum / n
	if mean < 19*time.Millisecond || mean > 21*time.Millisecond {
		t.Fatalf("mean service time %v, want 20ms", mean)
	}
}

// TestHang: a hung backend finishes nothing, in service or waiting, until
// the hang ends; then everything proceeds in order.
func TestHang(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := fakeTime(New(Model{Slots: 1, ServiceTime: 10 * time.Millisecond}, 1))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		done := make([]time.Time, 2)
		var wg sync.WaitGroup
		wg.Add(1)
		go serve(b, context.Background(), &done[0], &wg) // in service when the hang starts
		synctest.Wait()
		m := b.Model()
		m.Hung = true
		if err := b.SetModel(m); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go serve(b, context.Background(), &done[1], &wg) // arrives during the hang
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if !done[0].IsZero() || !done[1].IsZero() {
			t.Fatalf("finished during the hang: %v", done)
		}
		m.Hung = false
		if err := b.SetModel(m); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		if got := done[0].Sub(start); got != 5*time.Second {
			t.Errorf("the request in service finished at %v, want at the end of the hang (5s)", got)
		}
		if got := done[1].Sub(start); got != 5*time.Second+10*time.Millisecond {
			t.Errorf("the waiting request finished at %v, want 10ms after the hang", got)
		}
	})
}

// TestBimodalServiceTimes: a tenth of the requests take ten times as long;
// the mean, slow ones included, is what MeanService says.
func TestBimodalServiceTimes(t *testing.T) {
	m := Model{Slots: 1, ServiceTime: 10 * time.Millisecond, SlowShare: 0.1, SlowFactor: 10}
	b, err := New(m, 3)
	if err != nil {
		t.Fatal(err)
	}
	var sum time.Duration
	slow := 0
	const n = 20000
	for range n {
		b.mu.Lock()
		d := b.serviceTimeLocked()
		b.mu.Unlock()
		sum += d
		if d == 100*time.Millisecond {
			slow++
		} else if d != 10*time.Millisecond {
			t.Fatalf("service time %v: neither mode", d)
		}
	}
	if slow < n*9/100 || slow > n*11/100 {
		t.Errorf("%d of %d slow, want about a tenth", slow, n)
	}
	if want, mean := m.MeanService(), sum/n; want != 19*time.Millisecond || mean < want*95/100 || mean > want*105/100 {
		t.Errorf("mean %v, MeanService %v; want both about 19ms", mean, want)
	}
	for _, bad := range []Model{{Slots: 1, SlowShare: 1.5}, {Slots: 1, SlowShare: -0.1}, {Slots: 1, SlowFactor: 0.5}, {Slots: 1, MaxQueue: -1}} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%+v validated", bad)
		}
	}
}

// TestMaxQueueFailsFast: with one slot and a queue of two, a fourth
// request at once is answered 503 without waiting and counted as refused;
// the others are served in order.
func TestMaxQueueFailsFast(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := fakeTime(New(Model{Slots: 1, ServiceTime: 10 * time.Millisecond, MaxQueue: 2}, 1))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		done, wait := sendInTurn(b, 3)
		w := httptest.NewRecorder()
		b.ServeHTTP(w, httptest.NewRequest("GET", "/work", nil))
		if w.Code != http.StatusServiceUnavailable || time.Since(start) != 0 {
			t.Fatalf("past the queue: %d after %v, want 503 at once", w.Code, time.Since(start))
		}
		wait()
		for i, d := range done {
			if got, want := d.Sub(start), time.Duration(i+1)*10*time.Millisecond; got != want {
				t.Errorf("request %d finished at %v, want %v", i, got, want)
			}
		}
		if s := b.Stats(); s.Served != 3 || s.Refused != 1 || s.Dropped != 0 {
			t.Fatalf("stats %+v, want 3 served and 1 refused", s)
		}
	})
}

// TestServiceTimedFromGrant: a request that waited for a slot is served
// for its service time counted from when the slot was handed to it, not
// from when its goroutine woke to take it, so that the backend's own
// hand-over does not cut its capacity. The clock reads 3 ms later each
// time it is read: the waiter reads it once after its grant, and sleeps
// 3 ms less (the code before slept the whole 10 ms: a 1 ms service
// served 918/s with one slot instead of 1,000).
func TestServiceTimedFromGrant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := New(Model{Slots: 1, ServiceTime: 10 * time.Millisecond}, 1)
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		clock := time.Unix(0, 0)
		b.now = func() time.Time {
			mu.Lock()
			defer mu.Unlock()
			clock = clock.Add(3 * time.Millisecond)
			return clock
		}
		first := make(chan struct{})
		slept := make(chan time.Duration, 2)
		var calls atomic.Int32
		b.sleep = func(d time.Duration) {
			slept <- d
			if calls.Add(1) == 1 {
				<-first // the first request holds the slot until the second waits
			}
		}
		var wg sync.WaitGroup
		var done [2]time.Time
		wg.Add(1)
		go serve(b, context.Background(), &done[0], &wg)
		if d := <-slept; d != 7*time.Millisecond {
			t.Errorf("the first request slept %v, want 7ms (10ms from its start)", d)
		}
		wg.Add(1)
		go serve(b, context.Background(), &done[1], &wg)
		synctest.Wait() // the second waits for the slot
		if w := b.Stats().Waiting; w != 1 {
			t.Fatalf("%d waiting, want the second request", w)
		}
		close(first)
		if d := <-slept; d != 7*time.Millisecond {
			t.Errorf("the waiter slept %v, want 7ms (10ms from its grant)", d)
		}
		wg.Wait()
	})
}

// TestBusySlotKeepsItsPace: a slot of 1 ms whose requests wake 100 us late
// (the precise sleeper and the scheduler on a busy machine) serves twenty
// requests waiting in line in 20.1 ms, not 22: each grant is dated when
// the slot was due free, so the lateness of one request is not added to
// every request after it. After a hang the slot banks nothing: the first
// request served after it takes its whole service time.
func TestBusySlotKeepsItsPace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := New(Model{Slots: 1, ServiceTime: time.Millisecond}, 1)
		if err != nil {
			t.Fatal(err)
		}
		b.sleep = func(d time.Duration) { time.Sleep(d + 100*time.Microsecond) }
		start := time.Now()
		done, wait := sendInTurn(b, 20)
		wait()
		if got, want := done[19].Sub(start), 20*time.Millisecond+100*time.Microsecond; got != want {
			t.Errorf("twenty requests of 1 ms in line, each woken 100 us late, ended after %v, want %v", got, want)
		}

		var wg sync.WaitGroup
		done = make([]time.Time, 2)
		wg.Add(1)
		go serve(b, context.Background(), &done[0], &wg) // in service when the hang starts
		synctest.Wait()
		if err := b.SetModel(Model{Slots: 1, ServiceTime: time.Millisecond, Hung: true}); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go serve(b, context.Background(), &done[1], &wg) // waits through the hang
		time.Sleep(time.Second)
		resumed := time.Now()
		if err := b.SetModel(Model{Slots: 1, ServiceTime: time.Millisecond}); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		if got, want := done[1].Sub(resumed), time.Millisecond+100*time.Microsecond; got != want {
			t.Errorf("the request waiting behind one a hang held in service ended %v after the hang, want %v (its whole service time)", got, want)
		}
	})
}
