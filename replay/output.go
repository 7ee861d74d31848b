package replay

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice/loadtest/report"
)

// Open opens a log to replay: "-" is standard input; a gzip-compressed
// file (or stream) is read uncompressed. The closer closes what was
// opened.
func Open(path string) (Source, io.Closer, error) {
	var f io.ReadCloser = os.Stdin
	if path != "-" {
		var err error
		if f, err = os.Open(path); err != nil {
			return Source{}, nil, err
		}
	}
	br := newPeekReader(f)
	if magic, _ := br.peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		z, err := gzip.NewReader(br)
		if err != nil {
			f.Close()
			return Source{}, nil, fmt.Errorf("%s: %w", path, err)
		}
		return Source{Name: path, R: z}, f, nil
	}
	return Source{Name: path, R: br}, f, nil
}

// peekReader reads r with its first bytes kept for a look.
type peekReader struct {
	r    io.Reader
	head []byte
}

func newPeekReader(r io.Reader) *peekReader { return &peekReader{r: r} }

func (p *peekReader) peek(n int) ([]byte, error) {
	for len(p.head) < n {
		buf := make([]byte, n-len(p.head))
		k, err := p.r.Read(buf)
		p.head = append(p.head, buf[:k]...)
		if err != nil {
			return p.head, err
		}
	}
	return p.head[:n], nil
}

func (p *peekReader) Read(b []byte) (int, error) {
	if len(p.head) > 0 {
		n := copy(b, p.head)
		p.head = p.head[n:]
		return n, nil
	}
	return p.r.Read(b)
}

// Summary writes the results as tables for a terminal: the first
// configuration's rules, and for each other one how it differs.
func Summary(w io.Writer, res []*Result) {
	r := res[0]
	span := "" // a log with no request has no time span
	if r.Requests > 0 {
		span = " from " + r.From.Format(time.RFC3339) + " to " + r.To.Format(time.RFC3339)
	}
	fmt.Fprintf(w, "%s lines, %s requests%s (%s), %s unknown lines; replayed in %s (%s lines/s)\n",
		num(r.Lines), num(r.Requests), span, r.Format, num(r.Unknown),
		r.Elapsed.Round(time.Millisecond), num(int64(r.LinesPerSecond)))
	for _, u := range r.Samples[:min(len(r.Samples), 5)] {
		fmt.Fprintf(w, "  unknown %s:%d: %s\n", u.Source, u.Line, u.Error)
	}
	if r.Requests == 0 && r.Unknown > 0 {
		fmt.Fprintf(w, "  no line was read as a request: is the log %s? (-format names it; -map reads a JSON log of other keys)\n", r.Format)
	}
	fmt.Fprintf(w, "\n%s: %s requests limited (429), %s served after waiting\n", orStdin(r.Config), num(r.Limited), num(r.Delayed))
	tw := tabwriter.NewWriter(w, 2, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "rule\tlimit\tmatched\tlimited\t%%\tkeys limited\ttop key (limited of requests)\tsuggested (%s keys / 0.1%% requests)\n", share(r))
	for _, rr := range r.Rules {
		top := "-"
		if len(rr.Top) > 0 && rr.Top[0].Limited > 0 {
			top = fmt.Sprintf("%s (%s of %s)", rr.Top[0].Key, num(rr.Top[0].Limited), num(rr.Top[0].Requests))
		}
		limited := num(rr.Limited)
		if rr.WouldDeny > 0 {
			limited += " (would: " + num(rr.WouldDeny) + ")"
		}
		sug := "-"
		if rr.Suggested > 0 {
			sug = num(rr.Suggested) + " / " + num(rr.SuggestedForRequests)
		}
		fmt.Fprintf(tw, "%s\t%s/%s\t%s\t%s\t%.2f\t%d of %d\t%s\t%s\n", rr.RuleID, num(rr.Limit), orDash(rr.Window), num(rr.Matched), limited,
			pct(rr.Limited+rr.WouldDeny, rr.Matched), rr.LimitedKeys, rr.Keys, top, sug)
	}
	tw.Flush()
	if m := r.Model; m != nil {
		fmt.Fprintf(w, "\nservice model (%d slots): %s admitted, %s queued, %s shed (%s queue timeouts)\n",
			m.Slots, num(m.Admitted), num(m.Queued), num(m.Shed), num(m.QueueTimeouts))
		for _, c := range m.Classes {
			if c.Class != "" {
				fmt.Fprintf(w, "  class %s: %s admitted, %s shed\n", c.Class, num(c.Admitted), num(c.Shed))
			}
		}
	}
	for _, other := range res[1:] {
		fmt.Fprintf(w, "\n%s compared: %s limited (%+d)\n", orStdin(other.Config), num(other.Limited), other.Limited-r.Limited)
		tw := tabwriter.NewWriter(w, 2, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "rule\tlimited\tthere\tdifference\tkeys limited\tthere")
		for _, d := range Diff(r, other) {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%+d\t%d\t%d\n", d.RuleID, num(d.Limited), num(d.OtherLimited), d.OtherLimited-d.Limited, d.Keys, d.OtherKeys)
		}
		tw.Flush()
	}
}

// RuleDiff is one rule in two configurations (a rule only in one has
// zeros for the other).
type RuleDiff struct {
	RuleID                    string
	Limited, OtherLimited     int64
	Keys, OtherKeys           int
	Limit, OtherLimit         int64
	Window, OtherWindow       string
	Algorithm, OtherAlgorithm string
}

// Diff compares two results rule by rule, in the first's order, then the
// rules only the second has.
func Diff(a, b *Result) []RuleDiff {
	var out []RuleDiff
	byID := map[string]RuleResult{}
	for _, rr := range b.Rules {
		byID[rr.RuleID] = rr
	}
	seen := map[string]bool{}
	for _, rr := range a.Rules {
		o := byID[rr.RuleID]
		seen[rr.RuleID] = true
		out = append(out, RuleDiff{RuleID: rr.RuleID, Limited: rr.Limited, OtherLimited: o.Limited, Keys: rr.LimitedKeys, OtherKeys: o.LimitedKeys,
			Limit: rr.Limit, OtherLimit: o.Limit, Window: rr.Window, OtherWindow: o.Window, Algorithm: rr.Algorithm, OtherAlgorithm: o.Algorithm})
	}
	for _, o := range b.Rules {
		if !seen[o.RuleID] {
			out = append(out, RuleDiff{RuleID: o.RuleID, OtherLimited: o.Limited, OtherKeys: o.LimitedKeys, OtherLimit: o.Limit, OtherWindow: o.Window, OtherAlgorithm: o.Algorithm})
		}
	}
	return out
}

// Page is the HTML report of the results: the facts, each rule's figures
// and top keys, the differences with the compared configurations, and
// charts of limited requests per minute by rule and of how close keys
// came to their limits.
func Page(res []*Result) report.Page {
	r := res[0]
	p := report.Page{Title: "sluice replay: " + orStdin(r.Config)}
	p.Facts = [][2]string{
		{"lines", num(r.Lines)}, {"requests", num(r.Requests)}, {"unknown lines", num(r.Unknown)},
		{"from", r.From.Format(time.RFC3339)}, {"to", r.To.Format(time.RFC3339)}, {"format", r.Format},
		{"limited (429)", fmt.Sprintf("%s (%.2f%%)", num(r.Limited), pct(r.Limited, r.Requests))},
		{"served after waiting", num(r.Delayed)},
		{"replay", fmt.Sprintf("%s, %s lines/s", r.Elapsed.Round(time.Millisecond), num(int64(r.LinesPerSecond)))},
	}
	if m := r.Model; m != nil {
		p.Facts = append(p.Facts, [2]string{"service model", fmt.Sprintf("%d slots: %s admitted, %s queued, %s shed", m.Slots, num(m.Admitted), num(m.Queued), num(m.Shed))})
	}
	for _, u := range r.Samples {
		p.Notes = append(p.Notes, fmt.Sprintf("unknown line %s:%d (%s): %s", u.Source, u.Line, u.Error, u.Text))
	}
	rules := report.Table{Title: "Rules", Header: []string{"rule", "algorithm", "limit", "mode", "matched", "limited", "would deny", "% limited", "keys limited", "suggested (" + share(r) + " of keys)", "suggested (0.1% of requests)"}}
	for _, rr := range r.Rules {
		rules.Rows = append(rules.Rows, []string{rr.RuleID, rr.Algorithm, num(rr.Limit) + "/" + orDash(rr.Window), rr.Mode, num(rr.Matched), num(rr.Limited),
			num(rr.WouldDeny), fmt.Sprintf("%.2f", pct(rr.Limited+rr.WouldDeny, rr.Matched)), fmt.Sprintf("%d of %d", rr.LimitedKeys, rr.Keys),
			orZero(rr.Suggested), orZero(rr.SuggestedForRequests)})
	}
	p.Tables = append(p.Tables, rules)
	for _, rr := range r.Rules {
		t := report.Table{Title: "Top keys: " + rr.RuleID, Header: []string{"key", "requests", "limited", "share limited"}}
		for _, k := range rr.Top {
			t.Rows = append(t.Rows, []string{k.Key, num(k.Requests), num(k.Limited), fmt.Sprintf("%.1f%%", 100*k.Share)})
		}
		p.Tables = append(p.Tables, t)
	}
	for _, other := range res[1:] {
		t := report.Table{Title: "Compared with " + orStdin(other.Config), Header: []string{"rule", "limit", "there", "limited", "there", "keys limited", "there"}}
		for _, d := range Diff(r, other) {
			t.Rows = append(t.Rows, []string{d.RuleID, num(d.Limit) + "/" + orDash(d.Window), num(d.OtherLimit) + "/" + orDash(d.OtherWindow),
				num(d.Limited), num(d.OtherLimited), strconv.Itoa(d.Keys), strconv.Itoa(d.OtherKeys)})
		}
		p.Tables = append(p.Tables, t)
	}
	timeline := report.Chart{File: "limited.png", Title: "Requests limited per minute, by rule", XLabel: "minutes from " + r.From.Format(time.RFC3339), YLabel: "requests limited"}
	for _, rr := range r.Rules {
		s := report.Series{Name: rr.RuleID}
		for _, m := range r.Minutes {
			s.X, s.Y = append(s.X, m.Start.Sub(r.From.Truncate(time.Minute)).Minutes()), append(s.Y, float64(m.Limited[rr.RuleID]))
		}
		timeline.Series = append(timeline.Series, s)
	}
	if len(r.Minutes) > 0 {
		all := report.Series{Name: "requests / 100", Dashed: true}
		for _, m := range r.Minutes {
			all.X, all.Y = append(all.X, m.Start.Sub(r.From.Truncate(time.Minute)).Minutes()), append(all.Y, float64(m.Requests)/100)
		}
		timeline.Series = append(timeline.Series, all)
	}
	closeness := report.Chart{File: "closeness.png", Title: "Keys by the most of the limit they used (100+: limited)", XLabel: "% of the limit", YLabel: "keys", Points: true}
	for _, rr := range r.Rules {
		s := report.Series{Name: rr.RuleID}
		for i, n := range rr.Closeness {
			s.X, s.Y = append(s.X, float64(10*i)), append(s.Y, float64(n))
		}
		closeness.Series = append(closeness.Series, s)
	}
	p.Charts = append(p.Charts, timeline, closeness)
	return p
}

// WriteReport writes DIR/report.html (with its charts as PNGs) and
// DIR/replay.json.
func WriteReport(dir string, res []*Result) error {
	if err := report.Write(dir, Page(res)); err != nil {
		return err
	}
	return report.WriteJSON(dir, "replay.json", res)
}

// SuggestedConfig is the configuration file src (YAML or JSON) with each
// rule's limit set to its suggestion for the share of keys (rules without
// one keep theirs): a file `sluice check` accepts, comments kept.
func SuggestedConfig(src []byte, r *Result) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return nil, err
	}
	if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, errors.New("the configuration is not a mapping")
	}
	sug := map[string]int64{}
	for _, rr := range r.Rules {
		if rr.Suggested > 0 {
			sug[rr.RuleID] = rr.Suggested
		}
	}
	top := doc.Content[0]
	for i := 0; i+1 < len(top.Content); i += 2 {
		if top.Content[i].Value != "rules" || top.Content[i+1].Kind != yaml.SequenceNode {
			continue
		}
		for _, rule := range top.Content[i+1].Content {
			setLimit(rule, sug)
		}
	}
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

func setLimit(rule *yaml.Node, sug map[string]int64) {
	if rule.Kind != yaml.MappingNode {
		return
	}
	id := ""
	for j := 0; j+1 < len(rule.Content); j += 2 {
		if rule.Content[j].Value == "rule_id" {
			id = rule.Content[j+1].Value
		}
	}
	n, ok := sug[id]
	if !ok {
		return
	}
	for j := 0; j+1 < len(rule.Content); j += 2 {
		if rule.Content[j].Value == "limit" {
			v := rule.Content[j+1]
			v.Kind, v.Tag, v.Value, v.Style = yaml.ScalarNode, "!!int", strconv.FormatInt(n, 10), 0
			v.LineComment = "suggested by sluice replay"
		}
	}
}

// share is the share of keys the suggestions spare, as a percentage.
func share(r *Result) string {
	for _, rr := range r.Rules {
		if rr.SuggestedShare > 0 {
			return strconv.FormatFloat(100*rr.SuggestedShare, 'f', -1, 64) + "%"
		}
	}
	return "99.9%"
}

func num(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			b = append(b, ',')
		}
		b = append(b, s[i])
	}
	if neg {
		return "-" + string(b)
	}
	return string(b)
}

func pct(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func orZero(n int64) string {
	if n == 0 {
		return "-"
	}
	return num(n)
}

func orStdin(s string) string {
	if s == "" {
		return "(rules)"
	}
	return s
}
