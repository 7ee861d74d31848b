package sim

import (
	"container/heap"
	"time"
)

// CPU makes the service and the sidecar share one CPU, as a service that
// burns CPU on the sidecar's own core does: the work in service is served
// by processor sharing (each of n jobs progresses at 1/n of the CPU; Slots
// still bounds how many requests are in service), and the sidecar's own
// work takes the same CPU, Admit for each request it forwards (added to
// the request's work), Refuse for each refusal and Handoff for each slot
// handed to a waiter of its queue (jobs of their own, which delay
// everything in service while they run). So a limit buys no latency (n
// jobs take n times their work whatever the limit) and every refusal, and
// every wait in the queue, costs goodput: the shape in which a limiter
// that reads the latency of a busy CPU as a queue in the service refuses
// or queues its way down (issue 23).
type CPU struct {
	// Admit is the sidecar's CPU per forwarded request.
	Admit time.Duration
	// Refuse is the sidecar's CPU per refusal.
	Refuse time.Duration
	// Handoff is the sidecar's CPU per slot handed to a waiter of its
	// queue (waking the waiter's goroutine).
	Handoff time.Duration
}

// psJob is work on the shared CPU: it ends when the CPU's virtual time
// reaches end; req is nil for the sidecar's own work.
type psJob struct {
	end float64
	seq uint64
	req *request
}

type psJobs []psJob

func (h psJobs) Len() int { return len(h) }
func (h psJobs) Less(i, j int) bool {
	if h[i].end != h[j].end {
		return h[i].end < h[j].end
	}
	return h[i].seq < h[j].seq
}
func (h psJobs) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *psJobs) Push(x any)   { *h = append(*h, x.(psJob)) }
func (h *psJobs) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// sharedCPU is a processor-sharing CPU on virtual time: v advances by the
// elapsed time over the number of jobs, so a job of work w added at v ends
// when v reaches v + w, however many come and go meanwhile.
type sharedCPU struct {
	v    float64 // work (ns) each job has received since the start
	at   time.Duration
	jobs psJobs
	seq  uint64
	gen  uint64 // the schedule the pending evCPU event belongs to
}

// advance brings v to now.
func (c *sharedCPU) advance(now time.Duration) {
	if n := len(c.jobs); n > 0 {
		c.v += float64(now-c.at) / float64(n)
	}
	c.at = now
}

// add puts work w (for r, or the sidecar's own when r is nil) on the CPU
// at now.
func (c *sharedCPU) add(now, w time.Duration, r *request) {
	c.advance(now)
	c.seq++
	heap.Push(&c.jobs, psJob{end: c.v + float64(max(w, 1)), seq: c.seq, req: r})
}

// next returns when the next job ends, and whether one runs.
func (c *sharedCPU) next() (time.Duration, bool) {
	if len(c.jobs) == 0 {
		return 0, false
	}
	left := (c.jobs[0].end - c.v) * float64(len(c.jobs))
	return c.at + time.Duration(max(left, 0)+0.5), true
}

// ended removes the jobs done at now and returns their requests (nil for
// the sidecar's work).
func (c *sharedCPU) ended(now time.Duration, out []*request) []*request {
	c.advance(now)
	for len(c.jobs) > 0 && c.jobs[0].end <= c.v+0.5 {
		j := heap.Pop(&c.jobs).(psJob)
		if j.req != nil {
			out = append(out, j.req)
		}
	}
	return out
}
