package trace

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/schema"
)

// ScanColumns calls fn once for every request of the opaltrace Parquet
// file at path, in file order, reading only the named columns (all when
// names is empty; an unknown name is an error naming it). The other
// fields stay absent. An error from fn stops the scan and is returned.
//
// fn receives ONE Request, reused for every row: r, and the list slices in
// it (which point into the scanner's buffers), are valid only during the
// call. Strings are ordinary strings and may be kept. A caller that keeps
// a request must Clone it.
//
// As with Reader, a scan of all columns validates every request, and
// r.Pos gives the row (1-based). Scans may run concurrently.
//
// Note: Reader goes through pqarrow, which builds Arrow arrays for every
// row group, and then allocates a fresh Request and fresh list slices per
// row: for the 2·10⁸ ITL gaps of a simulated trace of 10⁶ requests that
// was most of `stats --low-memory`'s three passes. ScanColumns decodes
// each column chunk with Parquet's typed column readers into buffers it
// keeps from one row group to the next (and, pooled, from one scan to the
// next) and hands out slices of them: BenchmarkScanColumns reads the
// summary columns in a fifth of BenchmarkReadParquetColumns' time.
func ScanColumns(path string, names []string, fn func(r *Request) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	s, err := newScanner(f, path, names)
	if err != nil {
		return err
	}
	defer s.close()
	return s.run(fn)
}

// A scanner reads the projected columns of one file into one Request.
type scanner struct {
	name     string
	pf       *file.Reader
	alloc    *reuseAllocator
	cols     []scanned
	req      Request // the reused request; the columns hold pointers into it
	validate bool    // all columns read, so a request must be valid
	row      int64   // rows handed to fn so far
}

// A scanned column: the leaf column of the file, the entry of columns,
// and its decoder.
type scanned struct {
	leaf, ci int
	name     string
	col      scanCol
}

// A scanCol decodes one column chunk at a time and sets its Request field
// row by row.
type scanCol interface {
	// load decodes a whole column chunk, of about levels levels (as its
	// metadata says), into the column's buffers.
	load(cr file.ColumnChunkReader, levels int64) error
	// next sets the field to the next row's value.
	next() error
	// left returns the levels not yet consumed.
	left() int
	// bufs returns the buffers, for the next scan (colPools).
	bufs() any
}

// colPools keep each column's buffers (levelBufs) from one scan to the
// next, by index into columns.
//
// Note: analyze.SummarizeStream scans a file three times, and the buffers
// of a simulated trace's ITL column hold 10⁶–10⁷ values: made afresh for
// every scan, their page faults and clearing took a third of a pass.
var colPools = make([]sync.Pool, len(columns))

// allocPool keeps reuseAllocators, with the page buffers they hold,
// between scans.
var allocPool sync.Pool

// close releases the file and gives the buffers back to the pools.
func (s *scanner) close() {
	s.pf.Close()
	for _, c := range s.cols {
		colPools[c.ci].Put(c.col.bufs())
	}
	allocPool.Put(s.alloc)
}

func newScanner(src parquet.ReaderAtSeeker, name string, names []string) (s *scanner, err error) {
	defer corrupt(name, &err)
	alloc, _ := allocPool.Get().(*reuseAllocator)
	if alloc == nil {
		alloc = &reuseAllocator{}
	}
	pf, err := file.NewParquetReader(src, file.WithReadProps(parquet.NewReaderProperties(alloc)))
	if err != nil {
		return nil, fmt.Errorf("%s: not a Parquet file: %w", name, err)
	}
	defer func() {
		if err != nil {
			pf.Close()
		}
	}()
	kv := pf.MetaData().KeyValueMetadata()
	if v := kv.FindValue(MetaSchemaVersion); v == nil {
		return nil, fmt.Errorf("%s: not an opaltrace Parquet file (no %s metadata)", name, MetaSchemaVersion)
	} else if *v != SchemaVersion {
		return nil, fmt.Errorf("%s: opaltrace schema version %s, this build reads %s", name, *v, SchemaVersion)
	}

	byName := make(map[string]int, len(columns))
	for i, c := range columns {
		byName[c.field.Name] = i
	}
	// The file's leaf columns by top-level field name: older writers
	// named a list's element "item", newer ones "element", so the full
	// leaf path differs while the field name does not.
	leaves := map[string]int{}
	var order []string // the known fields in file order
	sc := pf.MetaData().Schema
	for i := range sc.NumColumns() {
		top := sc.Column(i).ColumnPath()[0]
		if _, dup := leaves[top]; dup {
			return nil, fmt.Errorf("%s: column %s: more than one Parquet leaf column", name, top)
		}
		leaves[top] = i
		if _, ok := byName[top]; ok {
			order = append(order, top)
		}
	}
	want := order
	if len(names) > 0 {
		want = nil
		seen := map[string]bool{}
		for _, n := range names {
			if _, ok := byName[n]; !ok {
				return nil, fmt.Errorf("%s: no column %q in the opaltrace schema", name, n)
			}
			if _, ok := leaves[n]; !ok {
				return nil, fmt.Errorf("%s: no column %q", name, n)
			}
			if !seen[n] {
				seen[n] = true
				want = append(want, n)
			}
		}
	}
	s = &scanner{name: name, pf: pf, alloc: alloc, validate: len(names) == 0}
	for _, n := range want {
		leaf, ci := leaves[n], byName[n]
		col, err := newScanCol(sc.Column(leaf), columns[ci].ptr(&s.req), colPools[ci].Get())
		if err != nil {
			return nil, fmt.Errorf("%s: column %s: %w", name, n, err)
		}
		s.cols = append(s.cols, scanned{leaf: leaf, ci: ci, name: n, col: col})
	}
	return s, nil
}

// run reads row group after row group and hands each row to fn.
func (s *scanner) run(fn func(*Request) error) error {
	for g := range s.pf.NumRowGroups() {
		rows, err := s.load(g)
		if err != nil {
			return err
		}
		for range rows {
			s.req = Request{}
			s.row++
			for _, c := range s.cols {
				if err := c.col.next(); err != nil {
					return fmt.Errorf("%s:%d: %s: %w", s.name, s.row, c.name, err)
				}
			}
			s.req.SetPos(s.name, int(s.row))
			if s.validate {
				if err := s.req.Validate(); err != nil {
					return fmt.Errorf("%s:%d: %w", s.name, s.row, err)
				}
			}
			if err := fn(&s.req); err != nil {
				return err
			}
		}
		for _, c := range s.cols {
			if n := c.col.left(); n > 0 {
				return fmt.Errorf("%s: row group %d: %s: %d levels beyond its %d rows", s.name, g, c.name, n, rows)
			}
		}
	}
	return nil
}

// load decodes the projected column chunks of row group g. The Parquet
// library panics on some corrupted pages: that is an error here, while a
// panic of fn, which runs outside, stays a panic.
func (s *scanner) load(g int) (rows int64, err error) {
	defer corrupt(s.name, &err)
	rg := s.pf.RowGroup(g)
	rows = rg.NumRows()
	if rows < 0 {
		return 0, fmt.Errorf("%s: row group %d: %d rows", s.name, g, rows)
	}
	for _, c := range s.cols {
		cr, err := rg.Column(c.leaf)
		if err != nil {
			return 0, fmt.Errorf("%s: row group %d: %s: %w", s.name, g, c.name, err)
		}
		err = c.col.load(cr, chunkLevels(rg, c.leaf))
		if cerr := cr.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return 0, fmt.Errorf("%s: row group %d: %s: %w", s.name, g, c.name, err)
		}
	}
	return rows, nil
}

// chunkLevels is the number of levels of leaf column i of rg, as the
// chunk's metadata says: a hint only, as a corrupted file may lie.
func chunkLevels(rg *file.RowGroupReader, i int) int64 {
	md, err := rg.MetaData().ColumnChunk(i)
	if err != nil {
		return 0
	}
	return md.NumValues()
}

// batchOf is the number of levels to decode per call of a column reader
// for a chunk of about levels levels: small chunks do not get
// batchLevels of buffer each (a file has 64 columns).
func batchOf(levels int64) int64 { return min(max(levels, 1), batchLevels) }

// reserveLimit bounds the room reserved from a chunk's level count before
// decoding: a corrupted count must not allocate gigabytes.
const reserveLimit = 1 << 22

// reserve returns s, emptied, with room for about levels values and the
// last, empty, batch read after them.
func reserve[T any](s []T, levels int64) []T {
	return grow(s[:0], int(min(max(levels, 0), reserveLimit)+batchOf(levels)))
}

// grow returns s with room for n more values, doubling its capacity when
// it must grow (slices.Grow grows large slices by a quarter, which copies
// a chunk of 10⁶ values many times over).
func grow[T any](s []T, n int) []T {
	if cap(s)-len(s) >= n {
		return s
	}
	t := make([]T, len(s), max(2*cap(s), len(s)+n))
	copy(t, s)
	return t
}

// newScanCol makes the decoder of leaf column d into the Request field f
// points to (column.ptr), checking that the file stores what the field
// holds. It reuses old, a previous scan's buffers of the column, if any.
func newScanCol(d *schema.Column, f any, old any) (scanCol, error) {
	var phys parquet.Type
	var col scanCol
	def, list := d.MaxDefinitionLevel(), false
	switch p := f.(type) {
	case *string:
		phys, col = parquet.Types.ByteArray, &strScan{field: p, maxDef: def, levelBufs: bufsFrom[string](old)}
	case *Opt[int64]:
		phys, col = parquet.Types.Int64, &optScan[int64, int64]{field: p, maxDef: def, levelBufs: bufsFrom[int64](old), conv: func(v int64) int64 { return v }}
	case *Opt[float64]:
		phys, col = parquet.Types.Double, &optScan[float64, float64]{field: p, maxDef: def, levelBufs: bufsFrom[float64](old), conv: func(v float64) float64 { return v }}
	case *Opt[Time]:
		// Time columns are float64 seconds, as in columns.go.
		phys, col = parquet.Types.Double, &optScan[float64, Time]{field: p, maxDef: def, levelBufs: bufsFrom[float64](old), conv: TimeFromSeconds}
	case *[]int64:
		phys, col, list = parquet.Types.Int64, newListScan(p, d, old), true
	case *[]int32:
		phys, col, list = parquet.Types.Int32, newListScan(p, d, old), true
	case *[]float64:
		phys, col, list = parquet.Types.Double, newListScan(p, d, old), true
	default:
		return nil, fmt.Errorf("no decoder for a field of type %T", f)
	}
	if d.PhysicalType() != phys {
		return nil, fmt.Errorf("Parquet type %s, want %s", d.PhysicalType(), phys)
	}
	want := int16(0)
	if list {
		want = 1
	}
	if rep := d.MaxRepetitionLevel(); rep != want {
		return nil, fmt.Errorf("repetition level %d, want %d", rep, want)
	}
	return col, nil
}

// levelBufs are a column's decoded values and levels, kept from one row
// group to the next and, through colPools, from one scan to the next.
type levelBufs[P any] struct {
	vals     []P
	def, rep []int16
}

// bufsFrom returns old if it is buffers for P values, else new ones.
func bufsFrom[P any](old any) *levelBufs[P] {
	if b, ok := old.(*levelBufs[P]); ok {
		return b
	}
	return &levelBufs[P]{}
}

// batchLevels is the number of levels decoded per call of a column reader.
const batchLevels = 1 << 16

// readChunk decodes all of a column chunk of about levels levels with
// read (a typed ReadBatch), reusing the buffers; rep is read only when
// withRep.
func readChunk[P any](read func(int64, []P, []int16, []int16) (int64, int, error), levels int64, vals []P, def, rep []int16, withRep bool) ([]P, []int16, []int16, error) {
	vals, def = reserve(vals, levels), reserve(def, levels)
	if withRep {
		rep = reserve(rep, levels)
	}
	batch := batchOf(levels)
	b := int(batch)
	for {
		vals, def = grow(vals, b), grow(def, b)
		var r []int16
		if withRep {
			rep = grow(rep, b)
			r = rep[len(rep) : len(rep)+b]
		}
		n, nv, err := read(batch, vals[len(vals):len(vals)+b], def[len(def):len(def)+b], r)
		if err != nil {
			return vals, def, rep, err
		}
		if n < 0 || n > batch || nv < 0 || int64(nv) > n {
			return vals, def, rep, fmt.Errorf("column reader returned %d values in %d levels", nv, n)
		}
		if n == 0 {
			return vals, def, rep, nil
		}
		vals, def = vals[:len(vals)+nv], def[:len(def)+int(n)]
		if withRep {
			rep = rep[:len(rep)+int(n)]
		}
	}
}

// typedRead returns the ReadBatch of cr for values of type P.
func typedRead[P any](cr file.ColumnChunkReader) (func(int64, []P, []int16, []int16) (int64, int, error), error) {
	var f any
	switch c := cr.(type) {
	case *file.Int64ColumnChunkReader:
		f = c.ReadBatch
	case *file.Int32ColumnChunkReader:
		f = c.ReadBatch
	case *file.Float64ColumnChunkReader:
		f = c.ReadBatch
	}
	if r, ok := f.(func(int64, []P, []int16, []int16) (int64, int, error)); ok {
		return r, nil
	}
	var p P
	return nil, fmt.Errorf("column reader %T for %T values", cr, p)
}

// An optScan reads an optional number into an Opt field, converting the
// Parquet value P to the field's F.
type optScan[P int64 | float64, F any] struct {
	*levelBufs[P]
	field  *Opt[F]
	conv   func(P) F
	maxDef int16
	li, vi int // next level, next value
}

func (c *optScan[P, F]) load(cr file.ColumnChunkReader, levels int64) error {
	read, err := typedRead[P](cr)
	if err != nil {
		return err
	}
	c.li, c.vi = 0, 0
	c.vals, c.def, _, err = readChunk(read, levels, c.vals, c.def, nil, false)
	return err
}

func (c *optScan[P, F]) next() error {
	present, err := nextLevel(c.def, len(c.vals), c.maxDef, &c.li, &c.vi)
	switch {
	case err != nil:
		return err
	case present:
		*c.field = Some(c.conv(c.vals[c.vi-1]))
	default:
		*c.field = Opt[F]{}
	}
	return nil
}

// nextLevel reads the definition level of the next row of an optional
// scalar column: present says whether the row has a value (the one before
// *vi, which it advances past); li is the next level.
func nextLevel(def []int16, values int, maxDef int16, li, vi *int) (present bool, err error) {
	if *li >= len(def) {
		return false, errors.New("fewer values than the row group has rows")
	}
	d := def[*li]
	*li++
	switch {
	case maxDef == 0 || d == maxDef: // a required column has no levels
		if *vi >= values {
			return false, errors.New("fewer values than definition levels")
		}
		*vi++
		return true, nil
	case d >= 0 && d < maxDef:
		return false, nil
	}
	return false, fmt.Errorf("definition level %d above %d", d, maxDef)
}

func (c *optScan[P, F]) left() int { return len(c.def) - c.li }

func (c *optScan[P, F]) bufs() any { return c.levelBufs }

// A strScan reads an optional string; null is "".
//
// Note: it reads with ReadBatchInPage, whose values alias the page, and
// makes strings at once: ReadBatch would first copy every value into a
// fresh byte slice. Equal consecutive values (a dictionary column's runs:
// run, status, semantics) share one string instead of one per row.
type strScan struct {
	*levelBufs[string] // vals: one per present value
	field              *string
	maxDef             int16
	scratch            []parquet.ByteArray
	li, vi             int
}

func (c *strScan) load(cr file.ColumnChunkReader, levels int64) error {
	br, ok := cr.(*file.ByteArrayColumnChunkReader)
	if !ok {
		return fmt.Errorf("column reader %T for strings", cr)
	}
	clear(c.vals) // let the strings go
	c.vals, c.def, c.li, c.vi = reserve(c.vals, levels), reserve(c.def, levels), 0, 0
	batch := batchOf(levels)
	if int64(len(c.scratch)) < batch {
		c.scratch = make([]parquet.ByteArray, batch)
	}
	last := ""
	for {
		c.def = grow(c.def, int(batch))
		n, nv, err := br.ReadBatchInPage(batch, c.scratch, c.def[len(c.def):len(c.def)+int(batch)], nil)
		if err != nil {
			return err
		}
		if n < 0 || n > batch || nv < 0 || int64(nv) > n {
			return fmt.Errorf("column reader returned %d values in %d levels", nv, n)
		}
		if n == 0 {
			return nil
		}
		c.def = c.def[:len(c.def)+int(n)]
		for _, b := range c.scratch[:nv] {
			if string(b) != last {
				last = string(b)
			}
			c.vals = append(c.vals, last)
		}
	}
}

func (c *strScan) next() error {
	present, err := nextLevel(c.def, len(c.vals), c.maxDef, &c.li, &c.vi)
	switch {
	case err != nil:
		return err
	case present:
		*c.field = c.vals[c.vi-1]
	default:
		*c.field = ""
	}
	return nil
}

func (c *strScan) left() int { return len(c.def) - c.li }

func (c *strScan) bufs() any {
	clear(c.vals) // let the strings go
	return c.levelBufs
}

// A listScan reads a list in Parquet's layout: opaltrace writes three
// levels (optional list, repeated group, optional element), so a null list
// has definition level 0, an empty one 1, an element 3; a row's first
// element repeats at level 0, the others at 1. The levels are taken from
// the file's schema rather than assumed, so a list written with a required
// list or element reads too. A null element has no Request value: an
// error.
type listScan[P int64 | int32 | float64] struct {
	*levelBufs[P]
	field    *[]P
	empty    []P   // non-nil and empty: an empty list is not a null one
	elemDef  int16 // an element
	emptyDef int16 // an empty list; below it, a null list
	li, vi   int
}

func newListScan[P int64 | int32 | float64](f *[]P, d *schema.Column, old any) *listScan[P] {
	c := &listScan[P]{levelBufs: bufsFrom[P](old), field: f, empty: []P{}, elemDef: d.MaxDefinitionLevel()}
	c.emptyDef = c.elemDef - 1
	if d.SchemaNode().RepetitionType() == parquet.Repetitions.Optional {
		c.emptyDef-- // one more level: the element may be null
	}
	return c
}

func (c *listScan[P]) load(cr file.ColumnChunkReader, levels int64) error {
	read, err := typedRead[P](cr)
	if err != nil {
		return err
	}
	c.li, c.vi = 0, 0
	c.vals, c.def, c.rep, err = readChunk(read, levels, c.vals, c.def, c.rep, true)
	return err
}

func (c *listScan[P]) next() error {
	if c.li >= len(c.def) {
		return errors.New("fewer values than the row group has rows")
	}
	if c.rep[c.li] != 0 {
		return fmt.Errorf("a row starts at repetition level %d", c.rep[c.li])
	}
	switch d := c.def[c.li]; {
	case d < 0 || d > c.elemDef:
		return fmt.Errorf("definition level %d outside 0..%d", d, c.elemDef)
	case d < c.emptyDef:
		*c.field = nil
		c.li++
		return nil
	case d == c.emptyDef:
		*c.field = c.empty
		c.li++
		return nil
	}
	end := c.li
	for end < len(c.def) && (end == c.li || c.rep[end] != 0) {
		if c.rep[end] > 1 {
			return fmt.Errorf("repetition level %d above 1", c.rep[end])
		}
		if c.def[end] != c.elemDef {
			return fmt.Errorf("element %d: definition level %d: a null or missing element", end-c.li, c.def[end])
		}
		end++
	}
	n := end - c.li
	if c.vi+n > len(c.vals) {
		return errors.New("fewer values than definition levels")
	}
	// Capped, so that appending to the slice cannot overwrite the
	// next row's values.
	*c.field = c.vals[c.vi : c.vi+n : c.vi+n]
	c.vi += n
	c.li = end
	return nil
}

func (c *listScan[P]) left() int { return len(c.def) - c.li }

func (c *listScan[P]) bufs() any { return c.levelBufs }

// A reuseAllocator gives the Parquet reader back the buffers it freed.
//
// Note: the reader makes new page buffers (compressed and decompressed
// page, dictionary) for every column chunk, that is for every column of
// every row group, and the garbage collector had to clear and collect
// hundreds of megabytes of them per pass. Handed out again, they are
// cleared first, as fresh memory would be.
type reuseAllocator struct {
	mu   sync.Mutex
	free [][]byte
}

var goAlloc = memory.NewGoAllocator()

// reuseKeep bounds the freed buffers kept: a scan holds a few per column.
const reuseKeep = 64

func (a *reuseAllocator) Allocate(size int) []byte {
	a.mu.Lock()
	best := -1
	for i, b := range a.free {
		if cap(b) >= size && (best < 0 || cap(b) < cap(a.free[best])) {
			best = i
		}
	}
	if best < 0 {
		a.mu.Unlock()
		return goAlloc.Allocate(size) // 64-byte aligned, as Arrow expects
	}
	b := a.free[best]
	a.free[best] = a.free[len(a.free)-1]
	a.free[len(a.free)-1] = nil
	a.free = a.free[:len(a.free)-1]
	a.mu.Unlock()
	b = b[:size]
	clear(b)
	return b
}

func (a *reuseAllocator) Reallocate(size int, b []byte) []byte {
	if cap(b) >= size {
		return b[:size] // as memory.GoAllocator does
	}
	nb := a.Allocate(size)
	copy(nb, b)
	a.Free(b)
	return nb
}

func (a *reuseAllocator) Free(b []byte) {
	if cap(b) == 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.free) < reuseKeep {
		a.free = append(a.free, b[:0])
	}
}
