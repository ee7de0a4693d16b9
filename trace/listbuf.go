package trace

import (
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// A listBuf holds the rows of one list column of a row group being
// written.
//
// Note: Arrow's list builders grew their value buffers by reallocation
// from empty for every row group, and fresh memory from the Go allocator
// is zeroed and faulted in page by page: for a simulated trace, whose ITL
// lists are most of its bytes, that was a third of the writing time. A
// listBuf appends into slices it keeps from row group to row group and
// lends them to Arrow for the write, without copying.
type listBuf interface {
	add(r *Request) int                 // appends r's list (or null); returns its length
	array(t arrow.DataType) arrow.Array // the rows so far, sharing the buffers
	reset()                             // forget the rows, keep the memory
}

type listOf[T int64 | int32 | float64] struct {
	field func(*Request) *[]T
	elem  arrow.DataType
	vals  []T
	offs  []int32 // rows+1 offsets into vals
	valid []byte  // validity bitmap
	rows  int
	nulls int
}

func (l *listOf[T]) add(r *Request) int {
	if l.rows == 0 {
		l.offs = append(l.offs[:0], 0)
		clear(l.valid)
		l.valid = l.valid[:0]
	}
	if l.rows%8 == 0 {
		l.valid = append(l.valid, 0)
	}
	s := *l.field(r)
	if s == nil {
		l.nulls++
	} else {
		bitutil.SetBit(l.valid, l.rows)
		l.vals = append(l.vals, s...)
	}
	l.rows++
	l.offs = append(l.offs, int32(len(l.vals)))
	return len(s)
}

func (l *listOf[T]) array(t arrow.DataType) arrow.Array {
	if l.rows == 0 {
		l.offs = append(l.offs[:0], 0)
	}
	var valid *memory.Buffer
	if l.nulls > 0 {
		valid = memory.NewBufferBytes(l.valid)
	}
	values := array.NewData(l.elem, len(l.vals), []*memory.Buffer{nil, memory.NewBufferBytes(bytesOf(l.vals))}, nil, 0, 0)
	defer values.Release()
	data := array.NewData(t, l.rows, []*memory.Buffer{valid, memory.NewBufferBytes(bytesOf(l.offs))}, []arrow.ArrayData{values}, l.nulls, 0)
	defer data.Release()
	return array.MakeFromData(data)
}

func (l *listOf[T]) reset() {
	l.vals = l.vals[:0]
	l.rows, l.nulls = 0, 0
}

// bytesOf views a slice of fixed-size numbers as its bytes.
func bytesOf[T int64 | int32 | float64](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	var zero T
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(zero)))
}
