package logfmt

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unsafe"
)

// unsafeString views b as a string; b must not change while it is used.
func unsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

var months = [...]string{"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"}

// zoneCache keeps the last time zone offset a log's times had, so that
// reading a time allocates nothing (a log keeps one zone), and the last
// $time_local read, which the lines of one second share (a log of 200
// requests a second reads each one 200 times).
type zoneCache struct {
	offset int
	loc    *time.Location
	local  [26]byte  // the last $time_local parsed
	localT time.Time // ... and its time; zero: none yet
}

func (z *zoneCache) zone(offset int) *time.Location {
	if offset == 0 {
		return time.UTC
	}
	if z.loc == nil || z.offset != offset {
		z.offset, z.loc = offset, time.FixedZone("", offset)
	}
	return z.loc
}

// parseLocal reads nginx's $time_local, "10/Oct/2000:13:55:36 -0700".
func (z *zoneCache) parseLocal(s string) (time.Time, error) {
	if !z.localT.IsZero() && s == string(z.local[:]) {
		return z.localT, nil
	}
	t, err := z.parseLocalAfresh(s)
	if err == nil {
		copy(z.local[:], s)
		z.localT = t
	}
	return t, err
}

// parseLocalAfresh is parseLocal without the cache.
func (z *zoneCache) parseLocalAfresh(s string) (time.Time, error) {
	if len(s) != 26 || s[2] != '/' || s[6] != '/' || s[11] != ':' || s[14] != ':' || s[17] != ':' || s[20] != ' ' ||
		(s[21] != '+' && s[21] != '-') {
		return time.Time{}, badLocal(s)
	}
	month := 0
	for i, m := range months {
		if s[3:6] == m {
			month = i + 1
		}
	}
	var n [7]int
	for i, span := range [7][2]int{{0, 2}, {7, 11}, {12, 14}, {15, 17}, {18, 20}, {22, 24}, {24, 26}} {
		v, err := atoi(s[span[0]:span[1]])
		if err != nil {
			return time.Time{}, badLocal(s)
		}
		n[i] = v
	}
	if month == 0 {
		return time.Time{}, badLocal(s)
	}
	off := n[5]*3600 + n[6]*60
	if s[21] == '-' {
		off = -off
	}
	return time.Date(n[1], time.Month(month), n[0], n[2], n[3], n[4], 0, z.zone(off)), nil
}

func badLocal(s string) error {
	return fmt.Errorf("time %q: want dd/Mon/yyyy:hh:mm:ss +zzzz", s)
}

// parseISO reads an RFC 3339 time, with or without a fraction of a second
// ("2016-04-15T20:17:00.310Z", "2026-01-02T03:04:05+01:00").
func parseISO(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("time %q: want RFC 3339", s)
	}
	return t, nil
}

// parseAnyTime reads the times JSON logs hold: RFC 3339, nginx's
// $time_local, or seconds since the epoch ($msec, "1700000000.123").
func (z *zoneCache) parseAnyTime(s string) (time.Time, error) {
	switch {
	case len(s) == 26 && s[2] == '/':
		return z.parseLocal(s)
	case strings.IndexByte(s, '-') > 0:
		return parseISO(s)
	}
	d, ok := epoch(s)
	if !ok {
		return time.Time{}, fmt.Errorf("time %q: want RFC 3339, dd/Mon/yyyy:hh:mm:ss +zzzz or seconds since the epoch", s)
	}
	return time.Unix(0, d).UTC(), nil
}

// epoch reads seconds since the epoch, with a fraction, as nanoseconds.
func epoch(s string) (int64, bool) {
	whole, frac, _ := strings.Cut(s, ".")
	if whole == "" || len(whole) > 11 {
		return 0, false
	}
	n, err := atoi64(whole)
	if err != nil {
		return 0, false
	}
	ns := n * int64(time.Second)
	scale := int64(time.Second / 10)
	for i := 0; i < len(frac) && i < 9; i++ {
		c := frac[i] - '0'
		if c > 9 {
			return 0, false
		}
		ns += int64(c) * scale
		scale /= 10
	}
	return ns, true
}

func atoi64(s string) (int64, error) {
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i] - '0'
		if c > 9 {
			return 0, errors.New("not a number")
		}
		n = n*10 + int64(c)
	}
	return n, nil
}
