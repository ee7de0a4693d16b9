package trace

import (
	"fmt"
	"unsafe"

	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
)

// A colSink buffers one column of the row group being written, as the
// values and levels Parquet's column writers take, and writes them.
//
// Note: Writer used Arrow builders and pqarrow, which rebuilt the levels
// of every list value from the Arrow arrays and grew fresh, zeroed
// buffers for each row group: for a simulated trace, whose ITL lists are
// nearly all of its values, that was most of the writing time. Sinks keep
// their slices from one row group to the next and hand them to the column
// writer in one call.
type colSink interface {
	// add appends r's value; it returns the list values it added (0
	// for a scalar).
	add(r *Request) int
	// write writes the buffered rows to the column chunk writer w.
	write(w file.ColumnChunkWriter) error
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
		s.vals = append(s.vals, v.V)
		s.def = append(s.def, 1)
	} else {
		s.def = append(s.def, 0)
	}
	return 0
}

func (s *optSink[T]) write(w file.ColumnChunkWriter) error {
	return writeBatch(w, s.vals, s.def, nil)
}

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
		s.vals = append(s.vals, v.V.Seconds())
		s.def = append(s.def, 1)
	} else {
		s.def = append(s.def, 0)
	}
	return 0
}

func (s *timeSink) write(w file.ColumnChunkWriter) error {
	return writeBatch(w, s.vals, s.def, nil)
}

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
		s.vals = append(s.vals, unsafe.Slice(unsafe.StringData(v), len(v)))
		s.def = append(s.def, 1)
	} else {
		s.def = append(s.def, 0)
	}
	return 0
}

func (s *strSink) write(w file.ColumnChunkWriter) error {
	cw, ok := w.(*file.ByteArrayColumnChunkWriter)
	if !ok {
		return fmt.Errorf("trace: column %s: writer %T for strings", w.Descr().Name(), w)
	}
	_, err := cw.WriteBatch(s.vals, s.def, nil)
	return err
}

func (s *strSink) reset() {
	clear(s.vals) // let the strings go
	s.vals, s.def = s.vals[:0], s.def[:0]
}

// A listSink holds a list in Parquet's three-level layout (optional list,
// repeated group, optional element): a null list has definition level 0,
// an empty one 1, each element 3; the first element of a row repeats at
// level 0, the others at 1.
//
// Note: add keeps the values and each row's length, and write makes the
// levels: a concurrent Writer adds on the producer's goroutine and writes
// on the encoder's, and the ITL list's levels (two per value) were a
// tenth of the producer's share.
type listSink[T int64 | int32 | float64] struct {
	off      uintptr // of the []T field
	vals     []T
	lens     []int32 // per row: −1 for null, else the list's length
	def, rep []int16 // made by write
}

// Levels are copied from these runs rather than appended one by one.
var threes, ones = levelRun(3), levelRun(1)

func levelRun(v int16) []int16 {
	s := make([]int16, 4096)
	for i := range s {
		s[i] = v
	}
	return s
}

func appendRun(dst []int16, run []int16, n int) []int16 {
	for n > 0 {
		k := min(n, len(run))
		dst = append(dst, run[:k]...)
		n -= k
	}
	return dst
}

func (s *listSink[T]) add(r *Request) int {
	l := *(*[]T)(unsafe.Add(unsafe.Pointer(r), s.off))
	if l == nil {
		s.lens = append(s.lens, -1)
		return 0
	}
	if len(l) > 0 && s.vals == nil {
		// A row group's worth at once: growing by doubling copied
		// and faulted in twice that much fresh memory.
		s.vals = make([]T, 0, rowGroupListValues+1<<16)
	}
	s.vals = append(s.vals, l...)
	s.lens = append(s.lens, int32(len(l)))
	return len(l)
}

func (s *listSink[T]) write(w file.ColumnChunkWriter) error {
	s.def, s.rep = s.def[:0], s.rep[:0]
	for _, n := range s.lens {
		switch {
		case n < 0:
			s.def, s.rep = append(s.def, 0), append(s.rep, 0)
		case n == 0:
			s.def, s.rep = append(s.def, 1), append(s.rep, 0)
		default:
			s.def = appendRun(s.def, threes, int(n))
			s.rep = appendRun(append(s.rep, 0), ones, int(n)-1)
		}
	}
	return writeBatch(w, s.vals, s.def, s.rep)
}

func (s *listSink[T]) reset() { s.vals, s.lens = s.vals[:0], s.lens[:0] }

// writeBatch writes numbers to the typed column chunk writer w.
func writeBatch[T int64 | int32 | float64](w file.ColumnChunkWriter, vals []T, def, rep []int16) error {
	var err error
	switch v := any(vals).(type) {
	case []int64:
		if cw, ok := w.(*file.Int64ColumnChunkWriter); ok {
			_, err = cw.WriteBatch(v, def, rep)
			return err
		}
	case []int32:
		if cw, ok := w.(*file.Int32ColumnChunkWriter); ok {
			_, err = cw.WriteBatch(v, def, rep)
			return err
		}
	case []float64:
		if cw, ok := w.(*file.Float64ColumnChunkWriter); ok {
			_, err = cw.WriteBatch(v, def, rep)
			return err
		}
	}
	return fmt.Errorf("trace: column %s: writer %T for %T", w.Descr().Name(), w, vals)
}
