package report_test

import (
	"bytes"
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/net/html"

	"github.com/sluicehq/sluice/loadtest"
	"github.com/sluicehq/sluice/loadtest/report"
)

func sample() *loadtest.Summary {
	s := &loadtest.Summary{Target: "http://127.0.0.1:1/x", Profile: "constant", Rate: 100, DurationS: 3,
		Requests: 300, OK: 250, Status: map[string]int{"200": 250, "429": 30, "503": 20},
		OfferedRPS: 100, GoodputRPS: 83.3, OKLatency: loadtest.Percentiles{P50: 20, P90: 30, P99: 45}}
	for i := range 3 {
		s.Seconds = append(s.Seconds, loadtest.Second{T: i, Offered: 100, OK: 80 + i, Rejected: 10, Shed: 7, P50: 20, P90: 30, P99: 40 + float64(i)})
		s.Admin = append(s.Admin, loadtest.AdminSample{T: float64(i), Limit: 20 - i, Inflight: 15, Queue: i})
	}
	return s
}

// TestWriteRun: the files are written and parse: summary.json round-trips,
// report.html is HTML with one inline SVG per chart and no external
// resources, every PNG decodes.
func TestWriteRun(t *testing.T) {
	dir := t.TempDir()
	s := sample()
	if err := report.WriteRun(dir, s); err != nil {
		t.Fatal(err)
	}
	var back loadtest.Summary
	b, err := os.ReadFile(filepath.Join(dir, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("summary.json: %v", err)
	}
	if back.OK != 250 || back.Status["429"] != 30 || len(back.Seconds) != 3 || len(back.Admin) != 3 {
		t.Fatalf("summary.json lost figures: %+v", back)
	}
	for _, name := range []string{"throughput.png", "latency.png", "sluice.png"} {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if b := img.Bounds(); b.Dx() < 300 || b.Dy() < 150 {
			t.Fatalf("%s: %v is too small to read", name, b)
		}
	}
	page, err := os.ReadFile(filepath.Join(dir, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := html.Parse(bytes.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode {
			counts[n.Data]++
			for _, a := range n.Attr {
				if (a.Key == "src" || a.Key == "href") && strings.Contains(a.Val, "://") {
					t.Errorf("external resource <%s %s=%q>: the report must be self-contained", n.Data, a.Key, a.Val)
				}
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(doc)
	if counts["svg"] != 3 || counts["figure"] != 3 || counts["script"] != 0 {
		t.Fatalf("report.html: %d svg, %d figures, %d scripts; want 3, 3, 0", counts["svg"], counts["figure"], counts["script"])
	}
	if !strings.Contains(string(page), "83.3/s") {
		t.Fatal("report.html does not show the goodput")
	}
}

// TestWriteRunWithoutAdmin: no admin samples, no sluice chart.
func TestWriteRunWithoutAdmin(t *testing.T) {
	dir := t.TempDir()
	s := sample()
	s.Admin = nil
	if err := report.WriteRun(dir, s); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "sluice.png")); !os.IsNotExist(err) {
		t.Fatalf("sluice.png written without admin samples: %v", err)
	}
}

// TestWriteEmpty: a run that measured nothing still gives a report.
func TestWriteEmpty(t *testing.T) {
	if err := report.WriteRun(t.TempDir(), &loadtest.Summary{Seconds: []loadtest.Second{{}}}); err != nil {
		t.Fatal(err)
	}
}

// TestWriteGrid: a heat map shows each cell in its row and column, met
// and missed apart, and escapes what the cells say.
func TestWriteGrid(t *testing.T) {
	dir := t.TempDir()
	err := report.Write(dir, report.Page{Title: "sweep", Grids: []report.Grid{{
		Title: "Robustness sweep: gradient2", Rows: []string{"2x200ms", "5x50ms"}, Cols: []string{"0.5x", "2x"},
		Cells: [][]report.GridCell{{{Met: true, Text: "refused 0.00%"}, {Text: "goodput 80% <b>"}}, {{}, {Met: true, Text: "goodput 95%"}}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	html := string(b)
	for _, want := range []string{"Robustness sweep: gradient2", `<td class="met">refused 0.00%</td>`, `<td class="missed">goodput 80% &lt;b&gt;</td>`, "<td>5x50ms</td><td></td>"} {
		if !strings.Contains(html, want) {
			t.Errorf("report.html lacks %q", want)
		}
	}
}
