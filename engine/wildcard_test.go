package engine

import (
	"strings"
	"testing"
)

// A "*" matches any run of characters, none too, anywhere in a value.
func TestWildcardMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, value string
		want           bool
	}{
		{"foo*", "foo", true}, {"foo*", "foobar", true}, {"foo*", "fo", false},
		{"bar*b", "barb", true}, {"bar*b", "bar-x-b", true}, {"bar*b", "bar", false}, {"bar*b", "barbx", false},
		{"foo*bar*baz", "foobarbaz", true}, {"foo*bar*baz", "foo1bar2baz", true}, {"foo*bar*baz", "foobazbar", false},
		{"*", "", true}, {"*", "anything", true}, {"a**b", "ab", true}, {"*x*", "yxy", true}, {"*x*", "yy", false},
		{"ab*ba", "aba", false}, // the parts may not overlap
		{"exact", "exact", true}, {"exact", "exactly", false},
	} {
		if got := wildcardMatch(strings.Split(tc.pattern, "*"), tc.value); got != tc.want {
			t.Errorf("%q ~ %q: %v, want %v", tc.pattern, tc.value, got, tc.want)
		}
	}
}

// FuzzWildcardMatch: never panics, and a value built from the pattern by
// filling each "*" always matches.
func FuzzWildcardMatch(f *testing.F) {
	f.Add("a*b*c", "xyz")
	f.Fuzz(func(t *testing.T, pattern, fill string) {
		parts := strings.Split(pattern, "*")
		_ = wildcardMatch(parts, fill)
		if !wildcardMatch(parts, strings.Join(parts, fill)) {
			t.Fatalf("%q filled with %q does not match", pattern, fill)
		}
	})
}
