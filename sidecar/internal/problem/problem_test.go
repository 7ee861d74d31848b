package problem

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/engine"
)

// encoded is the body as encoding/json writes it, the reference Append
// must match byte for byte.
func encoded(t testing.TB, v *engine.Verdict) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := json.NewEncoder(&b).Encode(Of(v)); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestAppendIsWhatEncodingJSONWrites(t *testing.T) {
	odd := []string{"", "per_ip", `quo"te`, `back\slash`, "<script>&", "tab\there", "new\nline", "bell\a\b\f\r",
		"naïve", "日本", "\u2028\u2029", "bad\xffutf8", "\x00", "emoji😀", "~!@#$%^*()_+-={}[]|:;',./?"}
	reasons := []sluice.Reason{sluice.ReasonQuota, sluice.ReasonConcurrency, sluice.ReasonQueueFull, sluice.ReasonQueueTimeout,
		sluice.ReasonOverload, sluice.ReasonStoreDown, sluice.ReasonDeadline, sluice.Reason(200)}
	var vs []engine.Verdict
	for _, r := range reasons {
		for _, status := range []int{engine.StatusQuota, engine.StatusShed} {
			vs = append(vs, engine.Verdict{Status: status, Reason: r})
			v := engine.Verdict{Status: status, Reason: r}
			v.Decision.RetryAfter = sluice.Never
			vs = append(vs, v)
		}
	}
	for i, s := range odd {
		vs = append(vs,
			engine.Verdict{Status: engine.StatusQuota, Reason: sluice.ReasonQuota, Violated: []string{s}},
			engine.Verdict{Status: engine.StatusQuota, Reason: sluice.ReasonQuota, Violated: []string{s, odd[(i+1)%len(odd)], "global"}},
			engine.Verdict{Status: engine.StatusShed, Reason: sluice.ReasonOverload, Class: s},
			engine.Verdict{Status: engine.StatusShed, Reason: sluice.ReasonQueueTimeout, Class: s, Violated: []string{s}})
	}
	vs = append(vs, engine.Verdict{Status: engine.StatusQuota, Reason: sluice.ReasonQuota, Violated: []string{}})
	for i := range vs {
		want := encoded(t, &vs[i])
		if got := Append(nil, &vs[i]); !bytes.Equal(got, want) {
			t.Errorf("verdict %+v:\n got %s\nwant %s", vs[i], got, want)
		}
		// Appended, it leaves what dst held.
		if got := Append([]byte("x"), &vs[i]); !bytes.Equal(got, append([]byte("x"), want...)) {
			t.Errorf("verdict %+v appended to x: %s", vs[i], got)
		}
	}
}

func TestAppendAllocatesNothing(t *testing.T) {
	v := engine.Verdict{Status: engine.StatusShed, Reason: sluice.ReasonOverload, Class: "bulk", Violated: []string{"per_ip", "global"}}
	buf := make([]byte, 0, 1024)
	if n := testing.AllocsPerRun(100, func() { buf = Append(buf[:0], &v) }); n != 0 {
		t.Errorf("Append allocated %v times a call, want 0", n)
	}
}

func FuzzAppend(f *testing.F) {
	f.Add(uint8(1), 429, "per_ip", "global", "bulk", false)
	f.Add(uint8(5), 503, "", "<&>", "\xff\u2028", true)
	f.Fuzz(func(t *testing.T, reason uint8, status int, a, b, class string, never bool) {
		v := engine.Verdict{Status: status, Reason: sluice.Reason(reason), Class: class}
		if a != "" {
			v.Violated = append(v.Violated, a)
		}
		if b != "" {
			v.Violated = append(v.Violated, b)
		}
		if never {
			v.Decision.RetryAfter = sluice.Never
		}
		got, want := Append(nil, &v), encoded(t, &v)
		if !bytes.Equal(got, want) {
			t.Fatalf("got %s\nwant %s", got, want)
		}
		if !json.Valid(got) {
			t.Fatalf("invalid JSON: %s", got)
		}
	})
}

// BenchmarkBody is a shed request's body: Append against the encoder the
// engines used before.
func BenchmarkBody(b *testing.B) {
	v := engine.Verdict{Status: engine.StatusShed, Reason: sluice.ReasonOverload, Class: "bulk"}
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, 512)
		for b.Loop() {
			buf = Append(buf[:0], &v)
		}
	})
	b.Run("encoding_json", func(b *testing.B) {
		b.ReportAllocs()
		var buf bytes.Buffer
		for b.Loop() {
			buf.Reset()
			_ = json.NewEncoder(&buf).Encode(Of(&v))
		}
	})
}
