package trace

import (
	"unsafe"

	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/metadata"
)

// A colSink buffers one column of the row group being written, as the
// values and levels Parquet's column writers take, and writes them.
//
// Note: Writer used Arrow builders and pqarrow, which rebuilt the levels
// of every list value from the Arrow arrays and grew fresh, zeroed
// buffers for each row group: for a simulated trace, whose ITL lists are
// nearly all of its values, that was most of the writing time. Sinks keep
// their slices from one row group to the next and are encoded in one
// call (pqchunk.go).
type colSink interface {
	// add appends r's value; it returns the list values it added (0
	// for a scalar).
	add(r *Request) int
	// encode encodes the buffered rows into c's pages.
	encode(c *chunk)
	// reset forgets the rows and keeps the memory.
	reset()
}

// An optSink holds an optional number, read from the Opt[T] field at off
// in a Request: definition level 1 when present.
//
// Note: sinks read their field at an offset (fieldOffset) rather than
// through the column's accessor closure: a row of a simulated trace has
// some fifty scalar columns, and two indirect calls per column per row
// were a tenth of what the replay's own goroutine spends writing.
type optSink[T int64 | float64] struct {
	off  uintptr
	vals []T
	def  []int16
}

func (s *optSink[T]) add(r *Request) int {
	if v := (*Opt[T])(unsafe.Add(unsafe.Pointer(r), s.off)); v.OK {
		s.vals = appendRow(s.vals, v.V)
		s.def = appendRow(s.def, 1)
	} else {
		s.def = appendRow(s.def, 0)
	}
	return 0
}

func (s *optSink[T]) encode(c *chunk) { encodeOptional(c, s.vals, s.def) }

func (s *optSink[T]) reset() { s.vals, s.def = s.vals[:0], s.def[:0] }

// A timeSink holds an optional Time, read from the Opt[Time] field at
// off, as float64 seconds.
type timeSink struct {
	off  uintptr
	vals []float64
	def  []int16
}

func (s *timeSink) add(r *Request) int {
	if v := (*Opt[Time])(unsafe.Add(unsafe.Pointer(r), s.off)); v.OK {
		s.vals = appendRow(s.vals, v.V.Seconds())
		s.def = appendRow(s.def, 1)
	} else {
		s.def = appendRow(s.def, 0)
	}
	return 0
}

func (s *timeSink) encode(c *chunk) { encodeOptional(c, s.vals, s.def) }

func (s *timeSink) reset() { s.vals, s.def = s.vals[:0], s.def[:0] }

// fieldOffset returns the offset in a Request of the field f points to.
func fieldOffset[F any](f func(*Request) *F) uintptr {
	var r Request
	p := uintptr(unsafe.Pointer(f(&r)))
	base := uintptr(unsafe.Pointer(&r))
	var zero F
	if p < base || p+unsafe.Sizeof(zero) > base+unsafe.Sizeof(r) {
		panic("trace: a column's accessor does not point into the Request")
	}
	return p - base
}

// A strSink holds a string; "" is null. Values alias the strings' bytes,
// which are immutable.
type strSink struct {
	off  uintptr // of the string field
	vals []parquet.ByteArray
	def  []int16
}

func (s *strSink) add(r *Request) int {
	if v := *(*string)(unsafe.Add(unsafe.Pointer(r), s.off)); v != "" {
		s.vals = appendRow(s.vals, unsafe.Slice(unsafe.StringData(v), len(v)))
		s.def = appendRow(s.def, 1)
	} else {
		s.def = appendRow(s.def, 0)
	}
	return 0
}

func (s *strSink) encode(c *chunk) { encodeStrings(c, s.vals, s.def) }

func (s *strSink) reset() {
	clear(s.vals) // let the strings go
	s.vals, s.def = s.vals[:0], s.def[:0]
}

// A listSink holds a list in Parquet's three-level layout (optional list,
// repeated group, optional element): the values and each row's length;
// encodeList makes the levels. A sink of a Writer whose caller leaves its
// requests' lists alone (WriterOptions.SharedLists) keeps each row's list
// itself, in lists, rather than a copy of its values in vals.
type listSink[T int64 | int32 | float64] struct {
	off    uintptr // of the []T field
	vals   []T
	lens   []int32 // per row: −1 for null, else the list's length
	shared bool
	lists  [][]T // per row, when shared
}

func (s *listSink[T]) add(r *Request) int {
	l := *(*[]T)(unsafe.Add(unsafe.Pointer(r), s.off))
	if s.shared {
		s.lists = appendRow(s.lists, l)
	}
	if l == nil {
		s.lens = appendRow(s.lens, -1)
		return 0
	}
	if len(l) > 0 && s.vals == nil && !s.shared {
		// A row group's worth at once: growing by doubling copied
		// and faulted in twice that much fresh memory.
		s.vals = make([]T, 0, rowGroupListValues+1<<16)
	}
	if !s.shared {
		s.vals = append(s.vals, l...)
	}
	s.lens = appendRow(s.lens, int32(len(l)))
	return len(l)
}

func (s *listSink[T]) encode(c *chunk) {
	if s.shared {
		encodeList[T](c, listRows[T](s.lists), s.lens)
		return
	}
	encodeList[T](c, flatList[T](s.vals), s.lens)
}

func (s *listSink[T]) reset() {
	clear(s.lists) // let the lists go
	s.vals, s.lens, s.lists = s.vals[:0], s.lens[:0], s.lists[:0]
}

// share makes the sink keep the rows' lists rather than copy them.
func (s *listSink[T]) share() { s.shared = true }

// listValues are the values of a list column's rows, as encodeList
// reads them: appended, page by page, rows [from, to) that hold nv
// values starting at the val-th, and given to the statistics.
type listValues[T int64 | int32 | float64] interface {
	appendRows(dst []byte, from, to, val, nv int) []byte
	updateStats(st metadata.TypedStatistics, nulls int)
}

// flatList is the rows' values one after the other.
type flatList[T int64 | int32 | float64] []T

func (f flatList[T]) appendRows(dst []byte, _, _, val, nv int) []byte {
	return appendPlain(dst, f[val:val+nv])
}

func (f flatList[T]) updateStats(st metadata.TypedStatistics, nulls int) {
	updateStats(st, []T(f), nulls)
}

// listRows is each row's list (nil for a null row).
//
// Note: its statistics are updated list by list, which gives what one
// update over their concatenation gives: the minimum and maximum are
// order-independent (NaN is passed over, a zero minimum is always −0 and
// a zero maximum +0, other equal values have equal bits), counts add.
type listRows[T int64 | int32 | float64] [][]T

func (l listRows[T]) appendRows(dst []byte, from, to, _, nv int) []byte {
	// Grown once for the page, as one append of its values grows it:
	// list by list, it grew by doubling, and faulted in twice the memory.
	var zero T
	dst = growBytes(dst, nv*int(unsafe.Sizeof(zero)))
	for _, vs := range l[from:to] {
		dst = appendPlain(dst, vs)
	}
	return dst
}

func (l listRows[T]) updateStats(st metadata.TypedStatistics, nulls int) {
	for _, vs := range l {
		if len(vs) > 0 {
			updateStats(st, vs, 0)
		}
	}
	updateStats(st, []T(nil), nulls)
}
