package ingest

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/opaltrace/opaltrace/trace"
)

// azure reads the Azure LLM inference traces (Azure/AzurePublicDataset,
// Splitwise): CSV with the header TIMESTAMP,ContextTokens,GeneratedTokens
// (the 2025 multimodal trace adds NumImages, ignored). The 2023 files write
// "2023-11-16 18:17:03.9799600" (no zone, taken as UTC) and end without a
// newline; the 2024 week-long files write "2024-05-10 00:00:00.009930+00:00".
// One run per file; trace time 0 is the first row, whose wall-clock time
// is the run's StartUnixN. The counts are what production served:
// GeneratedTokens is the server's count of generated tokens. Streamed row
// by row.
const azureName = "azure"

var azure = Format{
	Name:      azureName,
	Sniff:     sniffAzure,
	NewReader: newAzureReader,
}

func sniffAzure(head []byte) bool {
	h := string(firstLine(head))
	return strings.HasPrefix(h, "TIMESTAMP,") && strings.Contains(h, "ContextTokens") && strings.Contains(h, "GeneratedTokens")
}

// A csvRows streams the data rows of a CSV file with a header, mapping
// column names to indexes.
type csvRows struct {
	cr   *csv.Reader
	file string
	cols map[string]int
	err  error // fatal
	line int   // line of the current row
	row  []string
	bad  *SyntaxError // the current row is malformed
	eof  bool
}

func newCSVRows(r io.Reader, file string) *csvRows {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	cr.TrimLeadingSpace = true
	return &csvRows{cr: cr, file: file}
}

// next reads the next row; false at the end or on a fatal error. A row
// that cannot be split sets bad and returns true.
func (c *csvRows) next() bool {
	c.bad = nil
	if c.eof {
		return false
	}
	for {
		row, err := c.cr.Read()
		if err == io.EOF {
			c.eof = true
			return false
		}
		var pe *csv.ParseError
		if errors.As(err, &pe) {
			c.line = pe.Line
			c.bad = badAt(c.file, pe.Line, "invalid CSV: %v", pe.Err)
			if c.cols == nil {
				c.eof = true
				return true
			}
			return true
		}
		if err != nil {
			c.err = fmt.Errorf("%s: %w", c.file, err)
			c.eof = true
			return false
		}
		c.line, _ = c.cr.FieldPos(0)
		if len(row) == 1 && row[0] == "" {
			// A line of blanks (TrimLeadingSpace leaves an empty
			// field): blank, as encoding/csv skips an empty line,
			// where it was a row of missing fields, a bad record
			// that made ingest exit 1 on a file ending in a space.
			continue
		}
		if c.cols == nil {
			c.cols = map[string]int{}
			for i, name := range row {
				name = strings.TrimSpace(strings.TrimPrefix(name, "\ufeff"))
				c.cols[name] = i
			}
			continue
		}
		c.row = row
		return true
	}
}

// field returns the named column of the current row, "" when short.
func (c *csvRows) field(name string) (string, bool) {
	i, ok := c.cols[name]
	if !ok || i >= len(c.row) {
		return "", false
	}
	return strings.TrimSpace(c.row[i]), true
}

// require checks that the header has every column of names.
func (c *csvRows) require(names ...string) string {
	for _, n := range names {
		if _, ok := c.cols[n]; !ok {
			return fmt.Sprintf("header: no %s column", n)
		}
	}
	return ""
}

// csvCount parses a token count column.
func csvCount(s string) (int64, string) {
	if s == "" {
		return 0, "missing"
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Sprintf("%q is not a number", s)
	}
	return checkCount(v)
}

// A csvRun is what every reader of a CSV file holding one run, a request
// a row, keeps: the rows, the run, the index of the next request and the
// current record. Readers embed it for Record, Err and Runs.
type csvRun struct {
	rows  *csvRows
	run   trace.Run
	index int
	cur   Record
	done  bool
}

// newCSVRun reads r, file, as the one run named run (suffixed "#1") of
// format source.
func newCSVRun(r io.Reader, file, run, source string) csvRun {
	return csvRun{
		rows: newCSVRows(r, file),
		run:  trace.Run{Name: run + "#1", Source: source, File: file},
	}
}

func (r *csvRun) Record() Record    { return r.cur }
func (r *csvRun) Err() error        { return r.rows.err }
func (r *csvRun) Runs() []trace.Run { return []trace.Run{r.run} }

// nextRow reads the next data row and returns a new request for it; false
// at the end of the input. When the row cannot be split, or the header
// lacks one of the columns cols (reading then stops), the request is nil
// and the current record is the error.
func (r *csvRun) nextRow(cols ...string) (*trace.Request, bool) {
	r.cur = nil
	if r.done || !r.rows.next() {
		r.done = true
		return nil, false
	}
	c := r.rows
	if c.bad != nil {
		r.cur = c.bad
		return nil, true
	}
	if msg := c.require(cols...); msg != "" {
		r.done = true
		r.cur = badAt(c.file, 1, "%s", msg)
		return nil, true
	}
	index := r.index
	r.index++
	return newRequest(&r.run, "", index, c.file, c.line), true
}

// A csvCountCol is a token-count column and where its value goes.
type csvCountCol struct {
	col string
	dst *trace.Opt[int64]
}

// setCounts parses the token-count columns cols of the current row; false,
// with the current record the error, when one is missing or malformed.
func (r *csvRun) setCounts(cols ...csvCountCol) bool {
	c := r.rows
	for _, f := range cols {
		s, _ := c.field(f.col)
		v, msg := csvCount(s)
		if msg != "" {
			r.cur = badAt(c.file, c.line, "%s: %s", f.col, msg)
			return false
		}
		*f.dst = trace.Some(v)
	}
	return true
}

type azureReader struct {
	csvRun
	origin  int64
	started bool
	layout  int // the index in azureLayouts of the form the last timestamp had
}

func newAzureReader(r io.Reader, file, run string, opts Options) Reader {
	return &azureReader{csvRun: newCSVRun(r, file, run, azureName)}
}

// azureLayouts are the timestamp forms of the 2023 and 2024 traces.
var azureLayouts = []string{"2006-01-02 15:04:05.999999999Z07:00", "2006-01-02 15:04:05.999999999"}

// parseAzureTime parses s in one of azureLayouts, trying first the one at
// *last (the form of the previous row) and recording the one that parsed.
//
// Note: a trace keeps one form throughout; trying the zoned form first on
// the 2023 traces' zoneless rows made every row two parses, a fifth of
// ingesting them.
func parseAzureTime(s string, last *int) (time.Time, bool) {
	for k := range azureLayouts {
		i := (*last + k) % len(azureLayouts)
		if t, err := time.Parse(azureLayouts[i], s); err == nil {
			*last = i
			return t, true
		}
	}
	return time.Time{}, false
}

func (r *azureReader) Scan() bool {
	req, ok := r.nextRow("TIMESTAMP", "ContextTokens", "GeneratedTokens")
	if req == nil {
		return ok
	}
	c := r.rows
	req.OutputTokensSource = trace.OutputServerUsage
	ts, _ := c.field("TIMESTAMP")
	t, ok := parseAzureTime(ts, &r.layout)
	if !ok {
		r.cur = badAt(c.file, c.line, "TIMESTAMP: %q is not a time", ts)
		return true
	}
	ns := t.UnixNano()
	if !r.started {
		r.started, r.origin, r.run.StartUnixN = true, ns, ns
	}
	if ns < r.origin {
		// The traces are sorted; an earlier row would need a negative
		// arrival, which replay cannot place.
		r.cur = badAt(c.file, c.line, "TIMESTAMP: %s is before the first row's", ts)
		return true
	}
	req.Arrival = trace.Some(trace.Time(ns - r.origin))
	if r.setCounts(csvCountCol{"ContextTokens", &req.InputTokens}, csvCountCol{"GeneratedTokens", &req.OutputTokens}) {
		r.cur = validated(req)
	}
	return true
}
