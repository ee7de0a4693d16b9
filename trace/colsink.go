package trace

import (
	"fmt"
	"slices"
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

// An optSink holds an optional number: definition level 1 when present.
type optSink[T int64 | float64] struct {
	value func(*Request) (T, bool)
	vals  []T
	def   []int16
}

func (s *optSink[T]) add(r *Request) int {
	if v, ok := s.value(r); ok {
		s.vals = append(s.vals, v)
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

// A strSink holds a string; "" is null. Values alias the strings' bytes,
// which are immutable.
type strSink struct {
	field func(*Request) *string
	vals  []parquet.ByteArray
	def   []int16
}

func (s *strSink) add(r *Request) int {
	if v := *s.field(r); v != "" {
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
type listSink[T int64 | int32 | float64] struct {
	field    func(*Request) *[]T
	vals     []T
	def, rep []int16
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
	l := *s.field(r)
	if len(l) > 0 && s.vals == nil {
		// A row group's worth at once: growing by doubling copied
		// and faulted in twice that much fresh memory.
		n := rowGroupListValues + 1<<16
		s.vals = make([]T, 0, n)
		s.def, s.rep = slices.Grow(s.def, n), slices.Grow(s.rep, n) // keeping the rows before

	}
	switch {
	case l == nil:
		s.def, s.rep = append(s.def, 0), append(s.rep, 0)
	case len(l) == 0:
		s.def, s.rep = append(s.def, 1), append(s.rep, 0)
	default:
		s.vals = append(s.vals, l...)
		s.def = appendRun(s.def, threes, len(l))
		s.rep = appendRun(append(s.rep, 0), ones, len(l)-1)
	}
	return len(l)
}

func (s *listSink[T]) write(w file.ColumnChunkWriter) error {
	return writeBatch(w, s.vals, s.def, s.rep)
}

func (s *listSink[T]) reset() { s.vals, s.def, s.rep = s.vals[:0], s.def[:0], s.rep[:0] }

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
