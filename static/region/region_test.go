package region_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/netproxy"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/static"
	"github.com/sluicehq/sluice/static/region"
)

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	redis.SetLogger(quietLogger{})
	os.Exit(m.Run())
}

// TestBudgetsFollowDemandAndNeverExceedTheLimit: two regions, the home
// ("eu") local, the other ("us") across a delaying link. Budgets start
// even, move toward the busy region, never add up to more than the global
// limit, and stand while the link is cut.
func TestBudgetsFollowDemandAndNeverExceedTheLimit(t *testing.T) {
	home := redistest.Start(t)
	link := netproxy.Start(t, home.Addr(), 20*time.Millisecond)
	euClient := redis.NewClient(&redis.Options{Addr: home.Addr()})
	usClient := redis.NewClient(&redis.Options{Addr: link.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer euClient.Close()
	defer usClient.Close()
	regions := []string{"us", "eu"}
	mk := func(name string, c redis.UniversalClient) *region.Budgets {
		b, err := region.New(region.Config{Region: name, Regions: regions, Node: name + "-1", Home: c,
			Prefix: t.Name(), Interval: 50 * time.Millisecond, Timeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if region.Home(regions) != "eu" {
		t.Fatalf("home %q, want the first by name", region.Home(regions))
	}
	eu, us := mk("eu", euClient), mk("us", usClient)
	p := &static.Policy{Algorithm: static.FixedWindow, Limit: 1000, Window: time.Minute}
	eur, usr := eu.Rule("g", p), us.Rule("g", p)
	if eur.Budget() != 500 || usr.Budget() != 500 {
		t.Fatalf("before a sync: %d + %d, want an even split", eur.Budget(), usr.Budget())
	}
	ctx := context.Background()
	sum := func() int64 { return eur.Budget() + usr.Budget() }
	// us is busy, eu nearly idle.
	for range 40 {
		usr.Note(900)
		eur.Note(10)
		if err := us.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		if err := eu.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		if s := sum(); s > p.Limit {
			t.Fatalf("budgets %d + %d over the limit", eur.Budget(), usr.Budget())
		}
	}
	if usr.Budget() < 800 {
		t.Errorf("us, with 90x eu's demand, has %d of 1000", usr.Budget())
	}
	if eur.Budget() < 10 {
		t.Errorf("eu keeps %d: below the floor", eur.Budget())
	}
	if got := usr.Policy().Limit; got != usr.Budget() {
		t.Errorf("us enforces %d, budget %d", got, usr.Budget())
	}
	// The link is cut: us's budget stands; eu's demand grows but it cannot
	// take what us may still be using.
	link.Cut()
	before := usr.Budget()
	for range 10 {
		eur.Note(5000)
		if err := us.Sync(ctx); err == nil {
			t.Fatal("us synced across a cut link")
		}
		if err := eu.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if usr.Budget() != before {
		t.Errorf("us's budget moved from %d to %d while cut off", before, usr.Budget())
	}
	if s := sum(); s > p.Limit {
		t.Errorf("during the cut, budgets %d + %d over the limit", eur.Budget(), usr.Budget())
	}
	// Healed: us reports its lower demand, gives room back, and eu takes it.
	link.Heal()
	for range 40 {
		eur.Note(5000)
		usr.Note(10)
		_ = us.Sync(ctx)
		if err := eu.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		if s := sum(); s > p.Limit {
			t.Fatalf("after healing, budgets %d + %d over the limit", eur.Budget(), usr.Budget())
		}
	}
	if eur.Budget() < 800 {
		t.Errorf("eu, now the busy one, has %d of 1000", eur.Budget())
	}
}

// TestMovedDemandFindsOnlyTheUnusedRoom: what a region admitted stays
// counted in its own store for the rest of the window, so when demand moves
// to another region within the window, the other region's budget rises
// only into what the first left unused; after the window, into all of it.
func TestMovedDemandFindsOnlyTheUnusedRoom(t *testing.T) {
	home := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: home.Addr()})
	defer c.Close()
	clock := sluice.NewFakeClock(time.Unix(1_700_000_000, 0))
	regions := []string{"a", "b"}
	mk := func(name string) *region.Budgets {
		b, err := region.New(region.Config{Region: name, Regions: regions, Node: name + "-1", Home: c,
			Prefix: t.Name(), Interval: 50 * time.Millisecond, Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	a, b := mk("a"), mk("b")
	p := &static.Policy{Algorithm: static.SlidingWindow, Limit: 100, Window: time.Minute}
	ar, br := a.Rule("g", p), b.Rule("g", p)
	ctx := context.Background()
	sync := func() {
		t.Helper()
		clock.Advance(50 * time.Millisecond)
		if err := a.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		if err := b.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Region a is busy and admits up to its budget.
	admittedA := int64(0)
	for range 40 {
		ar.Note(50)
		for admittedA < ar.Budget() {
			admittedA++
			ar.Admitted(ar.Policy(), sluice.Decision{Allowed: true, Limit: ar.Policy().Limit, Remaining: ar.Policy().Limit - admittedA})
		}
		sync()
	}
	if admittedA < 90 {
		t.Fatalf("the busy region admitted %d of 100", admittedA)
	}
	// Demand moves to b within the window.
	for range 40 {
		br.Note(50)
		sync()
		if room := 100 - admittedA; br.Budget() > room {
			t.Fatalf("b's budget %d with a's %d admitted in the window: %d over the global 100",
				br.Budget(), admittedA, br.Budget()+admittedA-100)
		}
	}
	if st := a.Stats().Rules[0]; st.Used != admittedA {
		t.Errorf("a reports use %d, admitted %d", st.Used, admittedA)
	}
	// A window later a's use has passed, and b takes the room.
	clock.Advance(p.Window + p.Window/8)
	for range 40 {
		br.Note(50)
		sync()
	}
	if br.Budget() < 90 {
		t.Errorf("a window after a's use, b has %d of 100", br.Budget())
	}
}
