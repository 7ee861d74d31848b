package loadtest

import (
	"net/http"
	"strings"
	"testing"
)

func TestReadTargets(t *testing.T) {
	hdr := http.Header{"X-Run": {"t1"}}
	httpFormat := "GET http://127.0.0.1:8080/a\nX-User-ID: u1\n\nPOST http://127.0.0.1:8080/b\nContent-Type: text/plain\n"
	got, err := ReadTargets(strings.NewReader(httpFormat), hdr)
	if err != nil {
		t.Fatal(err)
	}
	//lint:ignore SA1008 targets keep header names as written, like vegeta
	if len(got) != 2 || got[0].Method != "GET" || got[0].Header["X-User-ID"][0] != "u1" || got[1].Method != "POST" || got[1].Header.Get("X-Run") != "t1" {
		t.Fatalf("http format: %+v", got)
	}
	jsonl := `{"method":"GET","url":"http://127.0.0.1:8080/a","header":{"X-API-Key":["k"]}}
{"method":"PUT","url":"http://127.0.0.1:8080/b","body":"aGVsbG8="}
`
	got, err = ReadTargets(strings.NewReader(jsonl), nil)
	if err != nil {
		t.Fatal(err)
	}
	//lint:ignore SA1008 targets keep header names as written, like vegeta
	if len(got) != 2 || got[0].Header["X-API-Key"][0] != "k" || string(got[1].Body) != "hello" {
		t.Fatalf("json lines: %+v", got)
	}
	for _, bad := range []string{"", "   \n", "GET\n", "GET localhost/a\n", `{"method":"GET","url":"ftp://x/"}`, `{"method":`} {
		if _, err := ReadTargets(strings.NewReader(bad), nil); err == nil || !strings.HasPrefix(err.Error(), "targets: ") {
			t.Errorf("%q: error %v, want a targets error", bad, err)
		}
	}
}

func TestParseHeader(t *testing.T) {
	h := http.Header{}
	if err := ParseHeader(h, "X-User-ID:  u1 "); err != nil || h.Get("X-User-Id") != "u1" {
		t.Fatalf("%v %v", err, h)
	}
	for _, bad := range []string{"novalue", ": v", "a b: c"} {
		if err := ParseHeader(h, bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// FuzzReadTargets: any targets file gives targets with http(s) URLs or an
// error, never a panic.
func FuzzReadTargets(f *testing.F) {
	f.Add("GET http://127.0.0.1/a\nX-A: b\n")
	f.Add(`{"method":"GET","url":"http://127.0.0.1/a"}`)
	f.Add("POST https://h/x\n@/dev/null\n")
	f.Fuzz(func(t *testing.T, in string) {
		ts, err := ReadTargets(strings.NewReader(in), nil)
		if err != nil {
			return
		}
		for _, tg := range ts {
			if checkURL(tg.URL) != nil {
				t.Fatalf("accepted %q", tg.URL)
			}
		}
	})
}
