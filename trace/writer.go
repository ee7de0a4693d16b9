package trace

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/memory"
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
	// million-request runs 7.0 s against 5.9 s) when the encoder had the
	// more work of the two, writing through arrow-go's column writers.
	// Errors of the encoder are returned by a later Write or by Close.
	Concurrent bool
	// SharedLists makes Write keep each request's lists (ITL gaps, hash
	// ids, chunk tokens) rather than copy their values: the caller must
	// not change them, nor reuse their memory, until Close. The file is
	// the same.
	//
	// Note: a replay that keeps its records for its summary keeps their
	// lists anyway; copying them, millions of ITL gaps into two row
	// groups' buffers of 8 MiB each, was a tenth of what the replay's
	// merge goroutine spent writing, most of it faulting in the buffers.
	SharedLists bool
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
	if o.SharedLists {
		enc.cur.shareLists()
	}
	if o.Concurrent {
		// Two row groups: one filling, one being written.
		wr.full, wr.free = make(chan *rowGroup, 1), make(chan *rowGroup, 1)
		rg := newRowGroup()
		if o.SharedLists {
			rg.shareLists()
		}
		wr.free <- rg
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
		if w.failed() != nil {
			w.recycle(rg)
			continue
		}
		if err := w.enc.write(rg, true, w.recycle); err != nil {
			w.fail(err)
		}
	}
}

// recycle hands an emptied row group back to the producer.
func (w *Writer) recycle(rg *rowGroup) {
	rg.reset()
	w.free <- rg
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
		return w.enc.write(w.enc.cur, false, (*rowGroup).reset)
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
	meta := w.enc.meta
	if err := meta.AppendKeyValueMetadata(MetaSchemaVersion, SchemaVersion); err != nil {
		return err
	}
	if err := meta.AppendKeyValueMetadata(MetaRuns, string(runs)); err != nil {
		return err
	}
	for _, k := range w.keys {
		if err := meta.AppendKeyValueMetadata(k, w.meta[k]); err != nil {
			return err
		}
	}
	return w.enc.close()
}

// An encoder writes row groups to a Parquet file: it encodes each column
// chunk itself (pqchunk.go) and builds the footer with arrow-go's metadata
// builders.
type encoder struct {
	w       io.Writer
	pos     int64 // bytes written
	meta    *metadata.FileMetaDataBuilder
	chunks  []*chunk  // per column, reused across row groups
	ordinal int16     // of the next row group
	cur     *rowGroup // being filled
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

// shareLists makes the list sinks keep the rows' lists rather than copy
// them (WriterOptions.SharedLists).
func (rg *rowGroup) shareLists() {
	for _, s := range rg.lists {
		s.(interface{ share() }).share()
	}
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
	props := writerProperties()
	pq, err := pqarrow.ToParquet(schema, props, pqarrow.DefaultWriterProps())
	if err != nil {
		return nil, err
	}
	if pq.NumColumns() != len(columns) {
		return nil, fmt.Errorf("trace: %d Parquet columns for %d fields", pq.NumColumns(), len(columns))
	}
	if err := checkWriterProperties(props, pq); err != nil {
		return nil, err
	}
	chunks := make([]*chunk, len(columns))
	// The ITL column may be encoded beside the others (write): it has a
	// pager of its own.
	rest, itl := &pager{zenc: newFastZstd()}, itlPager()
	for i, c := range columns {
		// The levels the sinks write (pqchunk.go).
		def, rep := int16(1), int16(0)
		if c.list {
			def, rep = 3, 1
		}
		d := pq.Column(i)
		if d.MaxDefinitionLevel() != def || d.MaxRepetitionLevel() != rep {
			return nil, fmt.Errorf("trace: column %s has levels %d/%d, the writer writes %d/%d",
				c.field.Name, d.MaxDefinitionLevel(), d.MaxRepetitionLevel(), def, rep)
		}
		path := d.Path()
		chunks[i] = &chunk{descr: d, stats: props.StatisticsEnabledFor(path), dict: props.DictionaryEnabledFor(path),
			maxStats: int(props.MaxStatsSizeFor(path)), pg: rest}
		if i == itlColumn {
			chunks[i].pg = itl
		}
	}
	// The Arrow schema, stored as pqarrow stores it, lets Arrow readers
	// restore the exact types.
	meta := metadata.KeyValueMetadata{}
	meta.Append("ARROW:schema", base64.StdEncoding.EncodeToString(flight.SerializeSchema(schema, memory.DefaultAllocator)))
	e := &encoder{w: w, meta: metadata.NewFileMetadataBuilder(pq, props, meta), chunks: chunks, cur: newRowGroup()}
	if err := e.out(magic); err != nil {
		return nil, err
	}
	return e, nil
}

// magic begins and ends a Parquet file.
var magic = []byte("PAR1")

func (e *encoder) out(b []byte) error {
	n, err := e.w.Write(b)
	e.pos += int64(n)
	if err == nil && n < len(b) {
		err = io.ErrShortWrite
	}
	return err
}

// write writes rg's rows as one row group of the file, and calls done
// with rg once its columns are encoded, before they are written out: a
// concurrent Writer's producer fills rg again meanwhile. With parallel,
// the ITL list, most of a simulated trace's bytes, is encoded on a
// goroutine of its own while this one encodes the other columns.
func (e *encoder) write(rg *rowGroup, parallel bool, done func(*rowGroup)) error {
	if rg.rows == 0 {
		done(rg)
		return nil
	}
	one := func(i int) {
		c := e.chunks[i]
		c.reset()
		rg.sinks[i].encode(c)
	}
	heavy := -1
	var wg sync.WaitGroup
	if parallel {
		heavy = itlColumn
		wg.Go(func() { one(heavy) })
	}
	for i := range rg.sinks {
		if i != heavy {
			one(i)
		}
	}
	wg.Wait()
	rows := rg.rows
	done(rg)

	rgm := e.meta.AppendRowGroup()
	for _, c := range e.chunks {
		cm := rgm.NextColumnChunk()
		st, ok, err := c.statistics()
		if err != nil {
			return fmt.Errorf("trace: statistics of column %s: %w", c.descr.Name(), err)
		}
		if ok {
			cm.SetStats(st)
		}
		info := metadata.ChunkMetaInfo{
			NumValues:        c.levels,
			IndexPageOffset:  -1,
			DataPageOffset:   e.pos + int64(c.dictLen),
			CompressedSize:   int64(len(c.buf)),
			UncompressedSize: c.uncompressed,
		}
		if c.dictLen > 0 {
			info.DictPageOffset = e.pos
		}
		if err := cm.Finish(info, c.dictLen > 0, false, c.encodingStats()); err != nil {
			return err
		}
		if err := e.out(c.buf); err != nil {
			return err
		}
	}
	rgm.SetNumRows(rows)
	if err := rgm.Finish(0, e.ordinal); err != nil {
		return err
	}
	e.ordinal++
	return nil
}

// close writes the footer: the file's metadata, its length, the magic.
func (e *encoder) close() error {
	fm, err := e.meta.Finish()
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if _, err := fm.WriteTo(&buf, nil); err != nil {
		return err
	}
	n := buf.Len()
	buf.Write(binary.LittleEndian.AppendUint32(nil, uint32(n)))
	buf.Write(magic)
	return e.out(buf.Bytes())
}

// itlColumn is the index of itl_s in columns.
var itlColumn = slices.IndexFunc(columns, func(c column) bool { return c.field.Name == "itl_s" })
