package static

import (
	"strconv"
	"testing"
	"time"
)

// TestShardKeysOfOneHash: keys of one slot (hashes whose high halves
// collide) are told apart by their text, each keeps its own state, and removing any of them (head,
// middle or tail of the hash's chain) leaves the others found and counted.
func TestShardKeysOfOneHash(t *testing.T) {
	s := &shard{keys: map[uint32]*entry{}, capacity: 100}
	s.lru.next, s.lru.prev = &s.lru, &s.lru
	p := &Policy{Algorithm: FixedWindow, Limit: 10, Window: time.Minute}
	const h = 42<<32 | 7 // one slot (42) for all
	keys := []string{"a", "b", "c", "d"}
	for i, k := range keys {
		e := s.lookup(k, h, p, 0)
		e.st.B = int64(i + 1)
	}
	if s.count != len(keys) || len(s.keys) != 1 {
		t.Fatalf("count %d, map %d: want %d keys under one hash", s.count, len(s.keys), len(keys))
	}
	for i, k := range keys {
		e := s.find(k, slotOf(h))
		if e == nil || e.key != k || e.st.B != int64(i+1) {
			t.Fatalf("find(%q) = %+v: another key's entry or none", k, e)
		}
	}
	if s.find("e", slotOf(h)) != nil || s.find("a", slotOf(h)+1) != nil {
		t.Fatal("found a key that was never added")
	}
	for _, k := range []string{"b", "d", "a"} { // middle, head (the last added), tail
		s.remove(s.find(k, slotOf(h)))
		if s.find(k, slotOf(h)) != nil {
			t.Fatalf("%q still found after its removal", k)
		}
	}
	if e := s.find("c", slotOf(h)); e == nil || e.st.B != 3 || s.count != 1 {
		t.Fatalf("the last key of the chain: %+v, count %d", e, s.count)
	}
	s.remove(s.find("c", slotOf(h)))
	if s.count != 0 || len(s.keys) != 0 || s.lru.next != &s.lru {
		t.Fatalf("empty shard holds count %d, map %d", s.count, len(s.keys))
	}
}

// TestMemoryKeyInUseOutlastsAFlood: a key checked at least once while half
// the store's keys come and go, in a flood of one-off identities through a
// full store, is never evicted, as under a strict LRU
// (its hits mark it, and eviction moves a marked key to the front instead
// of weighing it): its usage stays exact, not restored from an eviction.
func TestMemoryKeyInUseOutlastsAFlood(t *testing.T) {
	const maxKeys = 1000
	m := NewMemory(MemoryOptions{MaxKeys: maxKeys})
	// The key in use has more of its quota left than any of the flood's,
	// so that, weighed, it would be the first evicted.
	p := &Policy{Algorithm: FixedWindow, Limit: 1_000_000_000, Window: time.Hour}
	hot := []Limit{{RuleID: "r", Key: "hot", Policy: p, Cost: 1}}
	flood := []Limit{{RuleID: "f", Policy: &Policy{Algorithm: FixedWindow, Limit: 1000, Window: time.Hour}, Cost: 1}}
	var last Result
	const checks = 400
	for i := range checks {
		last, _ = m.Check(t.Context(), hot, nil)
		for j := range maxKeys / 2 { // half the store between two checks
			flood[0].Key = "flood:" + strconv.Itoa(i*maxKeys+j)
			_, _ = m.Check(t.Context(), flood, nil)
		}
	}
	if want := p.Limit - checks; last.Remaining != want {
		t.Errorf("the key in use has %d left after %d checks, want %d: it was evicted", last.Remaining, checks, want)
	}
	if st := m.Stats(); st.Evictions == 0 || st.Keys > maxKeys {
		t.Errorf("stats %+v: the flood was to evict, within the cap", st)
	}
}
