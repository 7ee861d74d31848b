// Package report writes what a load test or a tuning session measured as
// files people can read and share: a self-contained report.html (charts
// inlined as SVG, no scripts, no network), each chart as a PNG, and the
// figures as JSON. Charts are drawn by gonum.org/v1/plot.
package report

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"image/color"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Series is one line of a chart.
type Series struct {
	Name string
	X, Y []float64
	// Dashed draws the line dashed (e.g. the offered load).
	Dashed bool
}

// Mark is a vertical line at X with a label (e.g. the knee).
type Mark struct {
	X     float64
	Label string
}

// Chart is one chart, saved as File (a PNG name) and inlined in the page.
type Chart struct {
	File           string
	Title          string
	XLabel, YLabel string
	Series         []Series
	Marks          []Mark
	// Points draws the series' points too (for few, measured points).
	Points bool
}

// Page is a whole report.
type Page struct {
	Title string
	// Facts are name/value rows shown above the charts.
	Facts [][2]string
	// Notes are paragraphs shown under the facts.
	Notes []string
	// Grids are heat maps shown under the notes: a sweep's cells, each
	// green when it met its goal and red when not.
	Grids []Grid
	// Tables are shown under the grids, before the charts.
	Tables []Table
	Charts []Chart
}

// Table is a table of text: a title, a header row and rows.
type Table struct {
	Title  string
	Header []string
	Rows   [][]string
}

// Grid is a heat map of met/missed cells: Rows x Cols, Cells[row][col].
type Grid struct {
	Title      string
	Rows, Cols []string
	Cells      [][]GridCell
}

// GridCell is one cell of a Grid; an empty Text is a cell not run.
type GridCell struct {
	Met  bool
	Text string
}

// Chart size in the PNGs and the page.
const (
	width  = 8 * vg.Inch
	height = 3.6 * vg.Inch
)

// Write writes p into dir: report.html and one PNG per chart.
func Write(dir string, p Page) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var svgs []template.HTML
	for _, c := range p.Charts {
		pl, err := c.plot()
		if err != nil {
			return fmt.Errorf("chart %s: %w", c.Title, err)
		}
		if err := pl.Save(width, height, filepath.Join(dir, c.File)); err != nil {
			return fmt.Errorf("chart %s: %w", c.Title, err)
		}
		wt, err := pl.WriterTo(width, height, "svg")
		if err != nil {
			return err
		}
		var buf bytes.Buffer
		if _, err := wt.WriteTo(&buf); err != nil {
			return err
		}
		svg := buf.Bytes()
		if i := bytes.Index(svg, []byte("<svg")); i > 0 {
			svg = svg[i:] // drop the XML prolog: the SVG is inlined in HTML
		}
		svgs = append(svgs, template.HTML(svg)) // #nosec: produced by gonum/plot from our numbers
	}
	var out bytes.Buffer
	if err := pageTmpl.Execute(&out, struct {
		Page
		SVGs []template.HTML
	}{p, svgs}); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "report.html"), out.Bytes(), 0o644)
}

// WriteJSON writes v as indented JSON to dir/name.
func WriteJSON(dir, name string, v any) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name), append(b, '\n'), 0o644)
}

func (c Chart) plot() (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = c.Title
	p.X.Label.Text = c.XLabel
	p.Y.Label.Text = c.YLabel
	p.Y.Min = 0
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	for i, s := range c.Series {
		xys := make(plotter.XYs, 0, len(s.X))
		for j := range s.X {
			if j < len(s.Y) {
				xys = append(xys, plotter.XY{X: s.X[j], Y: s.Y[j]})
			}
		}
		if len(xys) == 0 {
			continue
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return nil, err
		}
		l.Color = plotutil.Color(i)
		l.Width = vg.Points(1.5)
		if s.Dashed {
			l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		}
		p.Add(l)
		p.Legend.Add(s.Name, l)
		if c.Points {
			sc, err := plotter.NewScatter(xys)
			if err != nil {
				return nil, err
			}
			sc.Color = plotutil.Color(i)
			sc.Shape = draw.CircleGlyph{}
			p.Add(sc)
		}
	}
	// Head room above the data for the legend.
	p.Y.Max = max(p.Y.Max*(1+0.09*float64(len(c.Series)+len(c.Marks))), 1)
	for _, m := range c.Marks {
		top := p.Y.Max
		if top <= 0 {
			top = 1
		}
		l, err := plotter.NewLine(plotter.XYs{{X: m.X, Y: 0}, {X: m.X, Y: top}})
		if err != nil {
			return nil, err
		}
		l.Color = color.RGBA{R: 200, A: 255}
		l.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
		p.Add(l)
		p.Legend.Add(m.Label, l)
	}
	return p, nil
}

var pageTmpl = template.Must(template.New("report").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{{.Title}}</title>
<style>
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 60em; color: #222; }
table { border-collapse: collapse; margin-bottom: 1em; }
td { padding: 0.2em 1em 0.2em 0; vertical-align: top; }
td:first-child { color: #666; }
table.grid td { padding: 0.3em 0.6em; font-size: 0.85em; }
table.data th { text-align: left; padding: 0.2em 1em 0.2em 0; border-bottom: 1px solid #ccc; }
table.data td { font-variant-numeric: tabular-nums; }
td.met { background: #c8ecc8; color: #222; }
td.missed { background: #f4c4c4; color: #222; }
figure { margin: 1.5em 0; }
svg { max-width: 100%; height: auto; }
</style>
</head>
<body>
<h1>{{.Title}}</h1>
<table>
{{range .Facts}}<tr><td>{{index . 0}}</td><td>{{index . 1}}</td></tr>
{{end}}</table>
{{range .Notes}}<p>{{.}}</p>
{{end}}
{{range $g := .Grids}}<h2>{{$g.Title}}</h2>
<table class="grid">
<tr><td></td>{{range $g.Cols}}<td>{{.}}</td>{{end}}</tr>
{{range $i, $row := $g.Cells}}<tr><td>{{index $g.Rows $i}}</td>{{range $row}}{{if .Text}}<td class="{{if .Met}}met{{else}}missed{{end}}">{{.Text}}</td>{{else}}<td></td>{{end}}{{end}}</tr>
{{end}}</table>
{{end}}
{{range $t := .Tables}}<h2>{{$t.Title}}</h2>
<table class="data">
<tr>{{range $t.Header}}<th>{{.}}</th>{{end}}</tr>
{{range $t.Rows}}<tr>{{range .}}<td>{{.}}</td>{{end}}</tr>
{{end}}</table>
{{end}}
{{range $i, $c := .Charts}}<figure>
{{index $.SVGs $i}}
<figcaption>{{$c.Title}} ({{$c.File}})</figcaption>
</figure>
{{end}}
</body>
</html>
`))
