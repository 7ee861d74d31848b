package static

import "sort"

// TimeLog is a sliding log's timestamps (Unix nanoseconds), oldest first, in a
// ring that grows as needed up to the policy's limit. Timestamps are pushed in
// non-decreasing order. A nil *TimeLog is an empty log. It is not safe for
// concurrent use; the store's lock guards it.
type TimeLog struct {
	ts   []int64
	head int
	n    int
}

// Len returns the number of timestamps held.
func (l *TimeLog) Len() int {
	if l == nil {
		return 0
	}
	return l.n
}

// At returns the i-th oldest timestamp, 0 <= i < Len().
func (l *TimeLog) At(i int) int64 { return l.ts[(l.head+i)%len(l.ts)] }

// Newest returns the latest timestamp, and false when the log is empty.
func (l *TimeLog) Newest() (int64, bool) {
	if l.Len() == 0 {
		return 0, false
	}
	return l.At(l.n - 1), true
}

// CountAtOrBefore returns how many timestamps are at or before cutoff (the
// oldest ones), without dropping them.
func (l *TimeLog) CountAtOrBefore(cutoff int64) int {
	return sort.Search(l.Len(), func(i int) bool { return l.At(i) > cutoff })
}

// Expire drops the timestamps at or before cutoff.
func (l *TimeLog) Expire(cutoff int64) {
	for l.n > 0 && l.ts[l.head] <= cutoff {
		l.head = (l.head + 1) % len(l.ts)
		l.n--
	}
	if l.n == 0 {
		l.head = 0
	}
}

// Push appends count copies of t, keeping at most limit timestamps: the
// oldest are dropped first.
func (l *TimeLog) Push(t, count, limit int64) {
	if limit <= 0 || count <= 0 {
		return
	}
	count = min(count, limit)
	if need := int64(l.n) + count; need > int64(len(l.ts)) && len(l.ts) < int(limit) {
		l.grow(int(min(limit, max(need, 2*int64(len(l.ts)), 4))))
	}
	for ; count > 0; count-- {
		if l.n == len(l.ts) {
			// Full at the limit: the oldest makes room.
			l.head = (l.head + 1) % len(l.ts)
			l.n--
		}
		l.ts[(l.head+l.n)%len(l.ts)] = t
		l.n++
	}
}

func (l *TimeLog) grow(size int) {
	ts := make([]int64, size)
	for i := 0; i < l.n; i++ {
		ts[i] = l.At(i)
	}
	l.ts, l.head = ts, 0
}

// Remove deletes up to count timestamps equal to t, the newest first.
func (l *TimeLog) Remove(t, count int64) {
	if l.Len() == 0 {
		return
	}
	kept := make([]int64, 0, l.n)
	for i := l.n - 1; i >= 0; i-- {
		v := l.At(i)
		if v == t && count > 0 {
			count--
			continue
		}
		kept = append(kept, v)
	}
	l.head, l.n = 0, len(kept)
	for i, v := range kept {
		l.ts[l.n-1-i] = v
	}
}
