package engine_test

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/engine"
)

func TestCanonicalPath(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"/auth/login", "/auth/login"},
		{"/auth/login/", "/auth/login"},
		{"/auth/login;x", "/auth/login"},
		{"/auth/login;jsessionid=1/", "/auth/login"},
		{"/admin;x/y", "/admin/y"},
		{"/a//b///c", "/a/b/c"},
		{"/a/./b/../c", "/a/c"},
		{"/../../etc", "/etc"},
		{"/", "/"},
		{"", "/"},
		{"//", "/"},
		{"/.well-known/x", "/.well-known/x"},
		{"/a;b=c;d/e;f", "/a/e"},
	} {
		got, ok := engine.CanonicalPath(c.in)
		if !ok || got != c.want {
			t.Errorf("CanonicalPath(%q) = %q, %v; want %q", c.in, got, ok, c.want)
		}
	}
	for _, bad := range []string{"/public/..;/admin", "/a/.;x/b", `/admin\x`, "/a\x00b", "/a\nb"} {
		if got, ok := engine.CanonicalPath(bad); ok {
			t.Errorf("CanonicalPath(%q) = %q: accepted an ambiguous path", bad, got)
		}
	}
	if n := testing.AllocsPerRun(100, func() { engine.CanonicalPath("/orders/123/items") }); n != 0 {
		t.Errorf("a canonical path allocates %v times", n)
	}
}

func FuzzCanonicalPath(f *testing.F) {
	for _, s := range []string{"/a/../b", "/a;x/", "//", "/..;/", "/a/./b/", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		c, ok := engine.CanonicalPath(p)
		if !ok {
			return
		}
		if !strings.HasPrefix(c, "/") || strings.Contains(c, "//") || strings.Contains(c, ";") ||
			(len(c) > 1 && strings.HasSuffix(c, "/")) {
			t.Fatalf("CanonicalPath(%q) = %q is not canonical", p, c)
		}
		for _, seg := range strings.Split(c[1:], "/") {
			if seg == "." || seg == ".." {
				t.Fatalf("CanonicalPath(%q) = %q keeps a dot segment", p, c)
			}
		}
		if again, ok := engine.CanonicalPath(c); !ok || again != c {
			t.Fatalf("not idempotent: %q -> %q -> %q", p, c, again)
		}
	})
}
