package static

import (
	"context"
	"time"

	"github.com/sluicehq/sluice"
)

// Split is a Store that checks each limit in one of two stores: limits with
// Local set in the local-first one (a fleet store deciding in process),
// the others in the exact one (Redis). A request whose limits all go to one
// store costs nothing more than that store. A request with limits in both is
// checked in the local store first (no round trip, and a denial there
// spares the exact store); if the exact store then denies, what the local
// store took is given back, so the check stays all-or-nothing.
type Split struct {
	exact, local Store
}

var _ Store = (*Split)(nil)

// NewSplit returns a Split over exact and local.
func NewSplit(exact, local Store) *Split { return &Split{exact: exact, local: local} }

// Check implements Store.
func (s *Split) Check(ctx context.Context, limits []Limit, each []sluice.Decision) (Result, error) {
	nLocal := 0
	for i := range limits {
		if limits[i].Local {
			nLocal++
		}
	}
	switch nLocal {
	case 0:
		return s.exact.Check(ctx, limits, each)
	case len(limits):
		return s.local.Check(ctx, limits, each)
	}
	loc, ex := s.parts(limits)
	locEach := make([]sluice.Decision, len(loc))
	lres, err := s.local.Check(ctx, loc, locEach)
	if err != nil {
		return lres, err
	}
	decisions := make([]sluice.Decision, len(limits))
	if !lres.Allowed {
		s.scatter(limits, decisions, locEach, nil)
		return s.finish(limits, each, decisions, lres), nil
	}
	exEach := make([]sluice.Decision, len(ex))
	xres, err := s.exact.Check(ctx, ex, exEach)
	if err != nil || !xres.Allowed {
		Reserved(s.local, loc, lres).Cancel(ctx)
		if err != nil {
			return xres, err
		}
	}
	s.scatter(limits, decisions, locEach, exEach)
	res := xres
	if xres.Allowed {
		res.Permit = bothPermits{lres.Permit, xres.Permit}
		res.Delay = max(lres.Delay, xres.Delay)
	}
	return s.finish(limits, each, decisions, res), nil
}

// parts splits limits into the local and the exact ones, in order.
func (s *Split) parts(limits []Limit) (loc, ex []Limit) {
	for _, l := range limits {
		if l.Local {
			loc = append(loc, l)
		} else {
			ex = append(ex, l)
		}
	}
	return loc, ex
}

// scatter puts the two stores' decisions back in the limits' order; a part
// not checked (nil) reads as admitted, unknown.
func (s *Split) scatter(limits []Limit, out, loc, ex []sluice.Decision) {
	i, j := 0, 0
	for k := range limits {
		if limits[k].Local {
			out[k] = loc[i]
			i++
			continue
		}
		if ex != nil {
			out[k] = ex[j]
		} else {
			out[k] = sluice.Decision{Allowed: true, RuleID: limits[k].RuleID, Remaining: -1}
		}
		j++
	}
}

func (s *Split) finish(limits []Limit, each, decisions []sluice.Decision, res Result) Result {
	d, idx := Combine(limits, decisions)
	if res.Allowed {
		d.Delay = max(d.Delay, res.Delay)
	}
	res.Decision, res.Index = d, idx
	if res.Permit == nil {
		res.Permit = sluice.NopPermit{}
	}
	if len(each) >= len(limits) {
		copy(each, decisions)
	}
	return res
}

// Charge implements Store, in both stores.
func (s *Split) Charge(ctx context.Context, limits []Limit, at time.Time) error {
	return s.inBoth(limits, func(st Store, part []Limit) error { return st.Charge(ctx, part, at) })
}

// Undo implements Store, in both stores.
func (s *Split) Undo(ctx context.Context, limits []Limit, res Result) error {
	return s.inBoth(limits, func(st Store, part []Limit) error { return st.Undo(ctx, part, res) })
}

// inBoth calls f with each store and its part of limits (a part that is
// empty is skipped), the exact store first, and returns the first error.
func (s *Split) inBoth(limits []Limit, f func(Store, []Limit) error) error {
	loc, ex := s.parts(limits)
	var err error
	if len(ex) > 0 {
		err = f(s.exact, ex)
	}
	if len(loc) > 0 {
		if e := f(s.local, loc); err == nil {
			err = e
		}
	}
	return err
}

// bothPermits releases two stores' permits.
type bothPermits [2]sluice.Permit

func (b bothPermits) Release(o sluice.Outcome) {
	for _, p := range b {
		if p != nil {
			p.Release(o)
		}
	}
}
