// Package replay answers "who would this limit have hit?" before anything
// is deployed: it reads access logs (package logfmt) and sends each
// request through the real engine, on a simulated clock that follows the
// log's timestamps, with each configuration given, and reports per rule
// and key what would have been limited, when, and how close the keys came
// to their limits, with the limits that would have spared a chosen share
// of keys. With a service model, the adaptive limit and its queue are
// replayed too.
package replay

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/replay/logfmt"
)

// Source is one log to read.
type Source struct {
	// Name names it in reports ("-" for standard input).
	Name string
	// R reads it, uncompressed (see Open).
	R io.Reader
}

// Options tunes a replay.
type Options struct {
	// Format is the logs' format; Auto detects it from the first line.
	Format logfmt.Format
	// Mapping names a JSON log's keys (logfmt.Mapping).
	Mapping logfmt.Mapping
	// Speed slows the replay: 1 replays in real time, 10 ten times as
	// fast; 0 (the default) as fast as the CPU allows.
	Speed float64
	// Slots, when > 0, replays the adaptive limit and its queue in front
	// of a model of the service with that many slots, each request taking
	// its logged upstream time (waiting for a slot when all are busy).
	// 0 replays the static rules only (the adaptive limit off).
	Slots int
	// TopKeys is how many keys each rule's report lists; default 10.
	TopKeys int
	// SuggestKeys is the share of keys a suggested limit spares (none of
	// them would have been limited); default 0.999.
	SuggestKeys float64
	// Progress, when set, is called about every 100,000 lines with the
	// lines and bytes read so far.
	Progress func(lines, bytes int64)
	// Decisions, when set, receives a line per request of the first
	// configuration: "<source>:<line> <status> <rule>" (status 200, 429
	// or 503, rule "-" when none refused it).
	Decisions io.Writer
}

// maxLine bounds a log line; a longer one is counted as unknown.
const maxLine = 64 << 10

// maxUnknownSamples is how many unknown lines a result shows.
const maxUnknownSamples = 20

// Run replays sources through one engine per configuration (the first is
// the one reported, the others compared with it) and returns a result
// per configuration. Lines that are not requests are counted, with their
// line numbers, never fatal; ctx ends the replay early (the results then
// cover what was read).
func Run(ctx context.Context, cfgs []*config.Config, sources []Source, o Options) ([]*Result, error) {
	if len(cfgs) == 0 {
		return nil, errors.New("replay: no configuration")
	}
	if o.TopKeys <= 0 {
		o.TopKeys = 10
	}
	if o.SuggestKeys <= 0 || o.SuggestKeys > 1 {
		o.SuggestKeys = 0.999
	}
	runs := make([]*run, len(cfgs))
	for i, c := range cfgs {
		r, err := newRun(c, o)
		if err != nil {
			for _, done := range runs[:i] {
				done.close()
			}
			return nil, fmt.Errorf("configuration %d: %w", i+1, err)
		}
		runs[i] = r
	}
	runs[0].decisions = o.Decisions
	defer func() {
		for _, r := range runs {
			r.close()
		}
	}()
	rd := reader{o: o, runs: runs, wallStart: time.Now()}
	for _, src := range inOrder(sources, o) {
		if err := rd.read(ctx, src); err != nil {
			return nil, err
		}
		if ctx.Err() != nil {
			break
		}
	}
	out := make([]*Result, len(runs))
	for i, r := range runs {
		r.finish()
		out[i] = r.result(rd.stats, time.Since(rd.wallStart), o)
	}
	return out, nil
}

// inOrder sorts the sources by the time of their first request, so that
// rotated logs given newest first (access.log access.log.1 ..., as a
// shell's glob lists them) are replayed oldest first. A source whose
// first line tells no time keeps its place among those that do not.
func inOrder(sources []Source, o Options) []Source {
	type keyed struct {
		src Source
		at  time.Time
	}
	ks := make([]keyed, len(sources))
	for i, src := range sources {
		br := bufio.NewReaderSize(src.R, maxLine)
		ks[i] = keyed{src: Source{Name: src.Name, R: br}, at: firstTime(br, o)}
	}
	slices.SortStableFunc(ks, func(a, b keyed) int {
		switch {
		case a.at.IsZero() || b.at.IsZero():
			return 0
		case a.at.Before(b.at):
			return -1
		case b.at.Before(a.at):
			return 1
		}
		return 0
	})
	out := make([]Source, len(ks))
	for i, k := range ks {
		out[i] = k.src
	}
	return out
}

// firstTime is the time of the first line br holds, read without
// consuming it; zero when it tells none.
func firstTime(br *bufio.Reader, o Options) time.Time {
	var line []byte
	for size := 4096; ; size *= 2 {
		b, err := br.Peek(min(size, maxLine))
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line = b[:i]
			break
		}
		if err != nil || size >= maxLine {
			line = b
			break
		}
	}
	p, err := parserFor(line, o)
	if p == nil || err != nil {
		return time.Time{}
	}
	var e logfmt.Entry
	if p.Parse(line, &e) != nil {
		return time.Time{}
	}
	return e.Time
}

// readStats are what reading the logs found, shared by every run.
type readStats struct {
	lines, requests, unknown, bytes int64
	samples                         []UnknownLine
	first, last                     time.Time
	format                          logfmt.Format
}

// reader reads the logs line by line and hands each request to every run.
type reader struct {
	o         Options
	runs      []*run
	parser    *logfmt.Parser
	stats     readStats
	wallStart time.Time
	entry     logfmt.Entry
}

func (rd *reader) read(ctx context.Context, src Source) error {
	line := 0
	err := eachLine(src.R, func(b []byte, tooLong bool) bool {
		line++
		rd.stats.lines++
		rd.stats.bytes += int64(len(b))
		if tooLong {
			rd.unknown(src.Name, line, b, errors.New("line longer than 64 KiB"))
			return true
		}
		rd.line(src.Name, line, b)
		if rd.o.Progress != nil && rd.stats.lines%100_000 == 0 {
			rd.o.Progress(rd.stats.lines, rd.stats.bytes)
			return ctx.Err() == nil
		}
		return true
	})
	if err != nil {
		return fmt.Errorf("%s: %w", src.Name, err)
	}
	return nil
}

// eachLine calls f with each line r holds (its newline kept), up to
// maxLine bytes: a longer line is passed cut there, with tooLong, and
// the rest of it skipped. It stops when f returns false.
func eachLine(r io.Reader, f func(b []byte, tooLong bool) bool) error {
	br := bufio.NewReaderSize(r, maxLine)
	for {
		b, err := br.ReadSlice('\n')
		tooLong := errors.Is(err, bufio.ErrBufferFull)
		if tooLong {
			err = skipLine(br)
		}
		if (len(b) > 0 || err == nil) && !f(b, tooLong) {
			return nil
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// skipLine reads to the end of a line too long to keep.
func skipLine(br *bufio.Reader) error {
	for {
		_, err := br.ReadSlice('\n')
		if !errors.Is(err, bufio.ErrBufferFull) {
			return err
		}
	}
}

// parserFor is the parser for o's format, detected from line when it is
// Auto; nil (and no error) when line tells nothing (an empty line).
func parserFor(line []byte, o Options) (*logfmt.Parser, error) {
	f := o.Format
	if f == logfmt.Auto {
		if f = logfmt.Detect(line); f == logfmt.Auto {
			return nil, nil
		}
	}
	return logfmt.NewParser(f, o.Mapping)
}

func (rd *reader) line(name string, n int, b []byte) {
	if rd.parser == nil {
		p, err := parserFor(b, rd.o)
		if err != nil {
			rd.unknown(name, n, b, err)
			return
		}
		if p == nil {
			return // an empty line before the first: nothing to detect
		}
		rd.parser, rd.stats.format = p, p.Format()
	}
	err := rd.parser.Parse(b, &rd.entry)
	switch {
	case errors.Is(err, logfmt.ErrSkip):
		return
	case err != nil:
		rd.unknown(name, n, b, err)
		return
	}
	e := &rd.entry
	if y := e.Time.Year(); y < 1971 || y > 2200 {
		rd.unknown(name, n, b, fmt.Errorf("time %s: outside 1971-2200", e.Time.Format(time.RFC3339)))
		return
	}
	rd.stats.requests++
	if rd.stats.first.IsZero() || e.Time.Before(rd.stats.first) {
		rd.stats.first = e.Time
	}
	if e.Time.After(rd.stats.last) {
		rd.stats.last = e.Time
	}
	rd.pace(e.Time)
	for i, r := range rd.runs {
		r.src, r.line = name, n
		status, rule := r.request(e)
		if i == 0 && rd.o.Decisions != nil && status != 0 {
			fmt.Fprintf(rd.o.Decisions, "%s:%d %d %s\n", name, n, status, rule)
		}
	}
}

// pace holds the replay to Speed times the log's own pace.
func (rd *reader) pace(t time.Time) {
	if rd.o.Speed <= 0 || rd.stats.first.IsZero() {
		return
	}
	due := rd.wallStart.Add(time.Duration(float64(t.Sub(rd.stats.first)) / rd.o.Speed))
	if d := time.Until(due); d > 0 {
		time.Sleep(d)
	}
}

func (rd *reader) unknown(name string, n int, b []byte, err error) {
	rd.stats.unknown++
	if len(rd.stats.samples) < maxUnknownSamples {
		text := strings.TrimRight(string(b[:min(len(b), 200)]), "\r\n")
		rd.stats.samples = append(rd.stats.samples, UnknownLine{Source: name, Line: n, Error: err.Error(), Text: text})
	}
}

// replayHeaders are a replayed request's headers: the identity headers the
// configuration reads, and those a mapping names.
type replayHeaders struct{ kv [][2]string }

// Get implements engine.Headers.
func (h *replayHeaders) Get(name string) string {
	for _, p := range h.kv {
		if strings.EqualFold(p[0], name) {
			return p[1]
		}
	}
	return ""
}

// Count implements engine.HeaderCounter: no allocation.
func (h *replayHeaders) Count(name string) int {
	n := 0
	for _, p := range h.kv {
		if strings.EqualFold(p[0], name) {
			n++
		}
	}
	return n
}

// Values implements engine.Headers.
func (h *replayHeaders) Values(name string) []string {
	var out []string
	for _, p := range h.kv {
		if strings.EqualFold(p[0], name) {
			out = append(out, p[1])
		}
	}
	return out
}

// outcome of a served request for the adaptive limit, from its logged
// status.
func outcome(status int) sluice.Outcome {
	if status == 0 {
		return sluice.Success
	}
	return engine.OutcomeOf(status)
}

// EstimateSlots reads sources (a first pass) and returns the service's
// capacity as its log shows it, by Little's law: the requests in the
// upstream at once, on average over each second (the second's upstream
// times summed, over a second), in the 99.9th percentile of the seconds,
// rounded up, at least 1; 0 when the lines carry no upstream times. A
// second is the unit because many logs keep no finer time.
func EstimateSlots(sources []Source, o Options) (int, error) {
	seconds := map[int64]int64{} // seconds by their concurrency: memory by concurrency, not lines
	var total int64
	cur, busy := int64(-1), time.Duration(0)
	flush := func() {
		if cur >= 0 {
			seconds[int64(math.Ceil(busy.Seconds()))]++
			total++
		}
	}
	var parser *logfmt.Parser
	var perr error
	var e logfmt.Entry
	for _, src := range sources {
		err := eachLine(src.R, func(b []byte, tooLong bool) bool {
			if tooLong {
				return true
			}
			if parser == nil {
				if parser, perr = parserFor(b, o); perr != nil {
					return false
				}
			}
			if parser != nil && parser.Parse(b, &e) == nil && e.HasUpstream {
				if sec := e.Time.Unix(); sec != cur {
					flush()
					cur, busy = sec, 0
				}
				busy += e.Upstream
			}
			return true
		})
		if err = cmp.Or(perr, err); err != nil {
			return 0, err
		}
	}
	flush()
	if total == 0 {
		return 0, nil
	}
	levels := make([]int64, 0, len(seconds))
	for n := range seconds {
		levels = append(levels, n)
	}
	slices.Sort(levels)
	var below int64
	for _, n := range levels {
		if below += seconds[n]; below*1000 >= total*999 {
			return int(max(1, n)), nil
		}
	}
	return int(max(1, levels[len(levels)-1])), nil
}
