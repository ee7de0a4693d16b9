package trace

import (
	"fmt"
	"os"
	"sync"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
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
	cols     []scanned // the projected columns' decoders
	next     []scanned // the same columns' second decoders (files of several row groups): run loads a row group into one set while the rows of the other are handed out
	req      Request   // the reused request; both sets hold pointers into it
	validate bool      // all columns read, so a request must be valid
	row      int64     // rows handed to fn so far
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
	for _, set := range [][]scanned{s.cols, s.next} {
		for _, c := range set {
			colPools[c.ci].Put(c.col.bufs())
		}
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
	if err := checkVersion(pf, name); err != nil {
		return nil, err
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
	sets := []*[]scanned{&s.cols}
	if pf.NumRowGroups() > 1 { // a second set only to decode ahead
		sets = append(sets, &s.next)
	}
	for _, set := range sets {
		for _, n := range want {
			leaf, ci := leaves[n], byName[n]
			col, err := newScanCol(sc.Column(leaf), columns[ci].ptr(&s.req), colPools[ci].Get())
			if err != nil {
				return nil, fmt.Errorf("%s: column %s: %w", name, n, err)
			}
			*set = append(*set, scanned{leaf: leaf, ci: ci, name: n, col: col})
		}
	}
	return s, nil
}

// A loaded row group: its rows, decoded into cols, or the error.
type loaded struct {
	cols []scanned
	rows int64
	err  error
}

// run reads row group after row group and hands each row to fn.
//
// Note: a goroutine decodes the next row group (decompression, levels,
// values) into one set of decoders while this one hands out the rows of
// the other: on a simulated trace the two halves take about the same
// time, and a pass of analyze.SummarizeStream over a million simulated
// requests took 2.2 s on one goroutine.
func (s *scanner) run(fn func(*Request) error) error {
	n := s.pf.NumRowGroups()
	ready := make(chan loaded, 1)   // decoded row groups, in order
	free := make(chan []scanned, 2) // decoder sets to load into
	stop := make(chan struct{})     // closed when run returns
	done := make(chan struct{})     // closed when the loader is gone
	free <- s.cols
	if s.next != nil {
		free <- s.next
	}
	go func() {
		defer close(done)
		for g := range n {
			var cols []scanned
			select {
			case cols = <-free:
			case <-stop:
				return
			}
			rows, err := s.load(cols, g)
			select {
			case ready <- loaded{cols, rows, err}:
			case <-stop:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	defer func() {
		close(stop)
		<-done
	}()
	for g := range n {
		l := <-ready
		if l.err != nil {
			return l.err
		}
		for range l.rows {
			s.req = Request{}
			s.row++
			for _, c := range l.cols {
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
		for _, c := range l.cols {
			if left := c.col.left(); left > 0 {
				return fmt.Errorf("%s: row group %d: %s: %d levels beyond its %d rows", s.name, g, c.name, left, l.rows)
			}
		}
		free <- l.cols
	}
	return nil
}

// load decodes the projected column chunks of row group g. The Parquet
// library panics on some corrupted pages: that is an error here, while a
// panic of fn, which runs outside, stays a panic.
func (s *scanner) load(cols []scanned, g int) (rows int64, err error) {
	defer corrupt(s.name, &err)
	rg := s.pf.RowGroup(g)
	rows = rg.NumRows()
	if rows < 0 {
		return 0, fmt.Errorf("%s: row group %d: %d rows", s.name, g, rows)
	}
	for _, c := range cols {
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
