// Package uploadpace bounds a streamed request body's arrival: a minimum
// rate per window and an end, for both of the sidecar's proxy engines.
package uploadpace

import (
	"io"
	"time"
)

// Reader bounds the part of a request body streamed past
// request_buffer, which arrives while the request holds its adaptive slot
// and its permits: every window (UploadGrace) must bring at least
// rate x window bytes (upload_min_rate), and no read may end after end
// (read_timeout), or the read fails with the connection's timeout error.
// Bytes sent fast earn no credit for later: a client that sends a large
// first part and then trickles is cut one window after the trickle starts,
// while an honest upload of any size goes on as long as it keeps the pace.
type Reader struct {
	r       io.Reader
	quantum int64 // bytes each window must bring; 0: no pace, end alone
	window  time.Duration
	end     time.Time // the request's read deadline; zero: none
	mark    time.Time // when the current window began
	got     int64     // bytes read since mark
	// set sets the connection's read deadline; now reads the clock.
	set func(time.Time) error
	now func() time.Time
}

// New paces r from now: rate bytes per second over each window;
// rate 0 bounds it by end alone.
func New(r io.Reader, rate int, window time.Duration, end time.Time, now func() time.Time, set func(time.Time) error) *Reader {
	return &Reader{r: r, quantum: int64(rate) * int64(window/time.Second), window: window, end: end,
		mark: now(), set: set, now: now}
}

// Read implements io.Reader.
func (p *Reader) Read(b []byte) (int, error) {
	if d := p.deadline(); !d.IsZero() {
		_ = p.set(d)
	}
	n, err := p.r.Read(b)
	if p.got += int64(n); p.quantum > 0 && p.got >= p.quantum {
		p.mark, p.got = p.now(), 0
	}
	if err == io.EOF {
		// The upload is whole: the request's own deadline again, so that
		// no pace deadline fires while the response is written.
		_ = p.set(p.end)
	}
	return n, err
}

// deadline is when the current window's bytes must have come.
func (p *Reader) deadline() time.Time {
	if p.quantum <= 0 {
		return p.end
	}
	d := p.mark.Add(p.window)
	if !p.end.IsZero() && d.After(p.end) {
		return p.end
	}
	return d
}
