package trace

// The column decoders of ScanColumns: one per kind of column, each
// reading a column chunk at a time into reused buffers and setting its
// Request field row by row.

import (
	"errors"
	"fmt"

	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/schema"
)

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
		return nil, fmt.Errorf("physical type %s, want %s", d.PhysicalType(), phys)
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
