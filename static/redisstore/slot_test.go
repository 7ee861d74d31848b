package redisstore

import "testing"

func TestSlot(t *testing.T) {
	// Values from the Redis Cluster specification and CLUSTER KEYSLOT.
	cases := map[string]uint16{
		"123456789":            12739, // the spec's CRC16 check value 0x31C3 mod 16384
		"foo":                  12182,
		"{user1000}.following": Slot("user1000"),
		"{user1000}.followers": Slot("user1000"),
		"foo{}{bar}":           Slot("foo{}{bar}"), // empty first tag: the whole key
		"foo{{bar}}zap":        Slot("{bar"),
		"sluice:{42}:orders":   Slot("42"),
	}
	for key, want := range cases {
		if got := Slot(key); got != want {
			t.Errorf("Slot(%q) = %d, want %d", key, got, want)
		}
	}
}
