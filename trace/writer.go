package trace

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// RowGroupRows bounds the rows buffered in memory and written per row
// group, so writing and reading stream in bounded memory.
const RowGroupRows = 64 * 1024

// rowGroupListValues bounds the list values (ITL gaps above all) of a row
// group: a simulated request has one ITL gap per output token, so 64K
// requests may carry 10⁷ of them, and a row group is held in memory by
// the writer and by every reader. (A variable, for tests.)
var rowGroupListValues = 1 << 20

// WriterOptions are the options of NewWriterWith.
type WriterOptions struct {
	// Concurrent writes row groups (column encoding and compression, most
	// of the work) on another goroutine while the caller fills the next
	// one, so that a producer (the replay engine) and the encoder each
	// keep a core busy. Write copies what it needs, as without the option
	// (strings are shared, being immutable).
	//
	// Note: copying records whole at Write and filling the scalar
	// columns on the encoder's goroutine measured slower (median of five
	// million-request runs 7.0 s against 5.9 s): the encoder has the more
	// work of the two.
	// Errors of the encoder are returned by a later Write or by Close.
	Concurrent bool
}

// A Writer streams Requests into a Parquet file (zstd, bounded row groups).
// Runs and other metadata go into the file's key/value metadata at Close,
// so they may be completed while requests stream.
type Writer struct {
	enc   *encoder
	runs  []Run
	meta  map[string]string
	keys  []string // metadata keys in the order set, for deterministic files
	total int64

	// shift halves the bounds of the next row groups: the first row
	// groups are small, so that a concurrent writer's encoder goroutine
	// starts early (it waited half a second for the first of a
	// million-request replay), and each doubles until the bounds.
	shift int

	// Concurrent mode: full row groups go to the encoder goroutine on
	// full, and come back emptied on free; done closes when it is gone.
	full chan *rowGroup
	free chan *rowGroup
	done chan struct{}
	mu   sync.Mutex
	err  error // the encoder's first error (under mu)
}

// NewWriter starts a Parquet file on w.
func NewWriter(w io.Writer) (*Writer, error) { return NewWriterWith(w, WriterOptions{}) }

// NewWriterWith starts a Parquet file on w with options.
func NewWriterWith(w io.Writer, o WriterOptions) (*Writer, error) {
	enc, err := newEncoder(w)
	if err != nil {
		return nil, err
	}
	// Both modes ramp alike, so that they write the same bytes.
	wr := &Writer{enc: enc, meta: map[string]string{}, shift: 5}
	if o.Concurrent {
		// Two row groups: one filling, one being written.
		wr.full, wr.free = make(chan *rowGroup, 1), make(chan *rowGroup, 1)
		wr.free <- newRowGroup()
		wr.done = make(chan struct{})
		go wr.encodeAll()
	}
	return wr, nil
}

// encodeAll is the encoder goroutine of a concurrent Writer. After an
// error it keeps draining, so that Write never blocks forever.
func (w *Writer) encodeAll() {
	defer close(w.done)
	for rg := range w.full {
		if w.failed() == nil {
			if err := w.enc.write(rg, true); err != nil {
				w.fail(err)
			}
		}
		rg.reset()
		w.free <- rg
	}
}

func (w *Writer) fail(err error) {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
	}
	w.mu.Unlock()
}

func (w *Writer) failed() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Write appends one request.
func (w *Writer) Write(r *Request) error {
	w.total++
	rg := w.enc.cur
	rg.add(r)
	if !rg.isFull(w.shift) {
		return nil
	}
	if w.shift > 0 {
		w.shift--
	}
	return w.ship()
}

// ship writes the row group being filled: at once, or, concurrently, by
// handing it to the encoder goroutine and taking the other one back.
func (w *Writer) ship() error {
	if w.full == nil {
		err := w.enc.write(w.enc.cur, false)
		w.enc.cur.reset()
		return err
	}
	if err := w.failed(); err != nil {
		return err
	}
	w.full <- w.enc.cur
	w.enc.cur = <-w.free
	return nil
}

// Rows returns the number of requests written so far.
func (w *Writer) Rows() int64 { return w.total }

// SetRuns sets the runs stored in the file's metadata.
func (w *Writer) SetRuns(runs []Run) { w.runs = runs }

// SetMeta sets a key/value pair of file metadata.
func (w *Writer) SetMeta(key, value string) {
	if _, ok := w.meta[key]; !ok {
		w.keys = append(w.keys, key)
	}
	w.meta[key] = value
}

// Close flushes the last row group, writes the metadata and the footer.
// It does not close the underlying io.Writer.
func (w *Writer) Close() error {
	var err error
	if w.enc.cur.rows > 0 {
		err = w.ship()
	}
	if w.full != nil {
		close(w.full)
		<-w.done
		w.full = nil
		if err == nil {
			err = w.failed()
		}
	}
	if err != nil {
		return err
	}
	runs, err := json.Marshal(w.runs)
	if err != nil {
		return err
	}
	fw := w.enc.fw
	if err := fw.AppendKeyValueMetadata(MetaSchemaVersion, SchemaVersion); err != nil {
		return err
	}
	if err := fw.AppendKeyValueMetadata(MetaRuns, string(runs)); err != nil {
		return err
	}
	for _, k := range w.keys {
		if err := fw.AppendKeyValueMetadata(k, w.meta[k]); err != nil {
			return err
		}
	}
	return fw.Close()
}

// An encoder writes row groups to a Parquet file.
type encoder struct {
	fw  *file.Writer
	cur *rowGroup // being filled
}

// A rowGroup buffers the rows of one row group, one sink per column.
type rowGroup struct {
	sinks  []colSink // in column order, for writing
	rows   int
	values int // list values buffered

	// The same sinks by kind, so that add calls them directly (a row
	// has some sixty columns; an interface call each was measurable).
	i64   []*optSink[int64]
	f64   []*optSink[float64]
	times []*timeSink
	strs  []*strSink
	lists []colSink
}

func newRowGroup() *rowGroup {
	rg := &rowGroup{sinks: make([]colSink, len(columns))}
	for i, c := range columns {
		s := c.newSink()
		rg.sinks[i] = s
		switch s := s.(type) {
		case *optSink[int64]:
			rg.i64 = append(rg.i64, s)
		case *optSink[float64]:
			rg.f64 = append(rg.f64, s)
		case *timeSink:
			rg.times = append(rg.times, s)
		case *strSink:
			rg.strs = append(rg.strs, s)
		default:
			rg.lists = append(rg.lists, s)
		}
	}
	return rg
}

// add appends r to every column.
func (rg *rowGroup) add(r *Request) {
	for _, s := range rg.strs {
		s.add(r)
	}
	for _, s := range rg.i64 {
		s.add(r)
	}
	for _, s := range rg.f64 {
		s.add(r)
	}
	for _, s := range rg.times {
		s.add(r)
	}
	for _, s := range rg.lists {
		rg.values += s.add(r)
	}
	rg.rows++
}

// isFull reports whether the row group has reached its bounds, divided
// by 2^shift.
func (rg *rowGroup) isFull(shift int) bool {
	return rg.rows >= RowGroupRows>>shift || rg.values >= rowGroupListValues>>shift
}

func (rg *rowGroup) reset() {
	for _, s := range rg.sinks {
		s.reset()
	}
	rg.rows, rg.values = 0, 0
}

func newEncoder(w io.Writer) (*encoder, error) {
	schema := Schema()
	opts := []parquet.WriterProperty{
		// zstd's fastest level: a tenth faster than its default for
		// the same size on simulated traces, whose ITL lists are most
		// of the bytes and repeat so much that level 1 finds it all.
		parquet.WithCompression(compress.Codecs.Zstd),
		parquet.WithCompressionLevel(1),
		parquet.WithMaxRowGroupLength(RowGroupRows),
		parquet.WithCreatedBy("opaltrace"),
		parquet.WithStats(true),
		// Dictionary encoding pays for the few distinct strings (run,
		// status, model, semantics) but not for floats and token counts,
		// whose hashing dominated the time of writing simulated traces.
		parquet.WithDictionaryDefault(false),
		// Larger pages compress the long ITL lists better (zstd sees
		// more of their repetition): a million simulated requests take
		// 230 MiB with 1 MiB pages, 192 MiB with 2, 170 MiB with 4;
		// but the column writers grow each page's buffer from 1 KiB and
		// zero it on reuse, so 4 MiB pages wrote them 25 % slower.
		parquet.WithDataPageSize(2 << 20),
	}
	for _, c := range columns {
		switch {
		case c.field.Type.ID() == arrow.STRING && c.field.Name != "request_id": // ids are unique
			opts = append(opts, parquet.WithDictionaryFor(c.field.Name, true))
		case c.list:
			// A list holds up to one value per output token: the
			// bulk of a simulated file; min/max statistics of list
			// elements prune nothing.
			opts = append(opts, parquet.WithStatsFor(c.field.Name+".list.element", false))
		}
	}
	props := parquet.NewWriterProperties(opts...)
	pq, err := pqarrow.ToParquet(schema, props, pqarrow.DefaultWriterProps())
	if err != nil {
		return nil, err
	}
	if pq.NumColumns() != len(columns) {
		return nil, fmt.Errorf("trace: %d Parquet columns for %d fields", pq.NumColumns(), len(columns))
	}
	for i, c := range columns {
		// The levels the sinks write (colsink.go).
		def, rep := int16(1), int16(0)
		if c.list {
			def, rep = 3, 1
		}
		if d := pq.Column(i); d.MaxDefinitionLevel() != def || d.MaxRepetitionLevel() != rep {
			return nil, fmt.Errorf("trace: column %s has levels %d/%d, the writer writes %d/%d",
				c.field.Name, d.MaxDefinitionLevel(), d.MaxRepetitionLevel(), def, rep)
		}
	}
	// The Arrow schema, stored as pqarrow stores it, lets Arrow readers
	// restore the exact types.
	meta := metadata.KeyValueMetadata{}
	meta.Append("ARROW:schema", base64.StdEncoding.EncodeToString(flight.SerializeSchema(schema, memory.DefaultAllocator)))
	// Hide any Close method: the Parquet writer closes a sink that has
	// one, and the caller (an atomic file, say) must decide when its
	// file is done.
	fw, err := file.NewParquetWriterWithError(struct{ io.Writer }{w}, pq.Root(), file.WithWriterProps(props), file.WithWriteMetadata(meta))
	if err != nil {
		return nil, err
	}
	return &encoder{fw: fw, cur: newRowGroup()}, nil
}

// write writes rg's rows as one row group of the file. With parallel,
// the ITL list, most of a simulated trace's bytes, is encoded on a
// goroutine of its own while this one encodes the other columns.
//
// Note: the row group is buffered: every column writer keeps its pages in
// memory until Close writes them out in column order, so columns can be
// encoded in any order, and on different goroutines (each column writer
// touches only its own state), and the file is the same. With two cores
// shared by the replay and the writer, the second encoding goroutine runs
// when the replay waits for the writer.
func (e *encoder) write(rg *rowGroup, parallel bool) error {
	if rg.rows == 0 {
		return nil
	}
	w, err := e.fw.AppendBufferedRowGroupChecked()
	if err != nil {
		return err
	}
	one := func(i int) error {
		cw, err := w.Column(i)
		if err != nil {
			return err
		}
		if err := rg.sinks[i].write(cw); err != nil {
			return fmt.Errorf("writing column %s: %w", columns[i].field.Name, err)
		}
		return nil
	}
	heavy := -1
	var heavyErr error
	var wg sync.WaitGroup
	if parallel {
		heavy = itlColumn
		wg.Go(func() { heavyErr = one(heavy) })
	}
	var errs []error
	for i := range rg.sinks {
		if i != heavy {
			if err := one(i); err != nil {
				errs = append(errs, err)
				break
			}
		}
	}
	wg.Wait()
	if err := errors.Join(append(errs, heavyErr)...); err != nil {
		return err
	}
	return w.Close()
}

// itlColumn is the index of itl_s in columns.
var itlColumn = slices.IndexFunc(columns, func(c column) bool { return c.field.Name == "itl_s" })
