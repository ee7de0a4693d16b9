package trace

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// randomRequests returns n requests with every column filled at random:
// strings null, from a few (dictionary pages), unique, long or non-ASCII;
// numbers null, small, extreme or special (NaN, ±Inf, −0 and subnormal
// doubles when specials is set; JSON readers cannot tell −0 from 0); lists
// null, empty or of up to 200 values. They need not be valid requests:
// the writer writes what it is given.
func randomRequests(rng *rand.Rand, n int, specials bool) []*Request {
	few := []string{"ok", "error", "llama-3.1-8b", "w0", "w1"}
	str := func(row int) string {
		switch rng.IntN(6) {
		case 0:
			return ""
		case 1, 2:
			return few[rng.IntN(len(few))]
		case 3:
			return fmt.Sprintf("u%d-%x", row, rng.Uint64())
		case 4:
			return "é☃\u00a0" + strings.Repeat("x", rng.IntN(40))
		default:
			return strings.Repeat(string(rune('a'+rng.IntN(26))), 1+rng.IntN(200))
		}
	}
	i64 := func() int64 {
		switch rng.IntN(4) {
		case 0:
			return int64(rng.IntN(100))
		case 1:
			return []int64{math.MinInt64, math.MaxInt64, -1, 0}[rng.IntN(4)]
		default:
			return rng.Int64() - math.MaxInt64/2
		}
	}
	f64 := func() float64 {
		if specials && rng.IntN(10) == 0 {
			return []float64{math.NaN(), math.Inf(1), math.Inf(-1), math.Copysign(0, -1),
				math.SmallestNonzeroFloat64, math.MaxFloat64}[rng.IntN(6)]
		}
		return rng.NormFloat64() * math.Pow(10, float64(rng.IntN(12)-6))
	}
	reqs := make([]*Request, n)
	for row := range reqs {
		r := &Request{}
		for _, c := range columns {
			if rng.IntN(4) == 0 {
				continue // null
			}
			switch p := c.ptr(r).(type) {
			case *string:
				*p = str(row)
			case *Opt[int64]:
				*p = Some(i64())
			case *Opt[float64]:
				*p = Some(f64())
			case *Opt[Time]:
				*p = Some(Time(rng.Int64N(1e15) - 1e14))
			case *[]int64:
				*p = make([]int64, rng.IntN(200))
				for k := range *p {
					(*p)[k] = i64()
				}
			case *[]int32:
				*p = make([]int32, rng.IntN(200))
				for k := range *p {
					(*p)[k] = rng.Int32() - math.MaxInt32/2
				}
			case *[]float64:
				*p = make([]float64, rng.IntN(200))
				for k := range *p {
					(*p)[k] = f64()
				}
			default:
				panic(fmt.Sprintf("column %s: no generator for %T", c.field.Name, p))
			}
		}
		reqs[row] = r
	}
	return reqs
}

// arrowRecord builds the Arrow record of reqs, as the schema says a
// Request maps to columns ("" and nil are null, times are seconds).
func arrowRecord(reqs []*Request) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, Schema())
	defer b.Release()
	for _, r := range reqs {
		for i, c := range columns {
			switch p := c.ptr(r).(type) {
			case *string:
				fb := b.Field(i).(*array.StringBuilder)
				if *p == "" {
					fb.AppendNull()
				} else {
					fb.Append(*p)
				}
			case *Opt[int64]:
				b.Field(i).(*array.Int64Builder).AppendValues([]int64{p.V}, []bool{p.OK})
			case *Opt[float64]:
				b.Field(i).(*array.Float64Builder).AppendValues([]float64{p.V}, []bool{p.OK})
			case *Opt[Time]:
				b.Field(i).(*array.Float64Builder).AppendValues([]float64{p.V.Seconds()}, []bool{p.OK})
			case *[]int64:
				appendList(b.Field(i).(*array.ListBuilder), *p, (*array.Int64Builder).AppendValues)
			case *[]int32:
				appendList(b.Field(i).(*array.ListBuilder), *p, (*array.Int32Builder).AppendValues)
			case *[]float64:
				appendList(b.Field(i).(*array.ListBuilder), *p, (*array.Float64Builder).AppendValues)
			}
		}
	}
	return b.NewRecordBatch()
}

func appendList[T any, B array.Builder](lb *array.ListBuilder, vals []T, add func(B, []T, []bool)) {
	if vals == nil {
		lb.AppendNull()
		return
	}
	lb.Append(true)
	add(lb.ValueBuilder().(B), vals, nil)
}

// tableRows reads a Parquet file with arrow-go's generic reader (pqarrow,
// not this package's Reader) into rows of comparable cells: nil for null,
// strings, int64s, float64 bits, and slices of those for lists.
func tableRows(t *testing.T, data []byte) [][]any {
	t.Helper()
	tbl, err := pqarrow.ReadTable(context.Background(), bytes.NewReader(data), nil, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Release()
	rows := make([][]any, tbl.NumRows())
	for i := range rows {
		rows[i] = make([]any, tbl.NumCols())
	}
	for c := range int(tbl.NumCols()) {
		row := 0
		for _, a := range tbl.Column(c).Data().Chunks() {
			for i := range a.Len() {
				rows[row][c] = cell(a, i)
				row++
			}
		}
	}
	return rows
}

func cell(a arrow.Array, i int) any {
	if a.IsNull(i) {
		return nil
	}
	switch a := a.(type) {
	case *array.String:
		return a.Value(i)
	case *array.Int64:
		return a.Value(i)
	case *array.Int32:
		return int64(a.Value(i))
	case *array.Float64:
		return math.Float64bits(a.Value(i))
	case *array.List:
		start, end := a.ValueOffsets(i)
		out := []any{}
		for k := start; k < end; k++ {
			out = append(out, cell(a.ListValues(), int(k)))
		}
		return out
	}
	panic(fmt.Sprintf("no cell for %T", a))
}

// requestRows is what a reader should read back from reqs, in tableRows'
// cells.
func requestRows(reqs []*Request) [][]any {
	rows := make([][]any, len(reqs))
	for i, r := range reqs {
		rows[i] = make([]any, len(columns))
		for c, col := range columns {
			var v any
			switch p := col.ptr(r).(type) {
			case *string:
				if *p != "" {
					v = *p
				}
			case *Opt[int64]:
				if p.OK {
					v = p.V
				}
			case *Opt[float64]:
				if p.OK {
					v = math.Float64bits(p.V)
				}
			case *Opt[Time]:
				if p.OK {
					v = math.Float64bits(p.V.Seconds())
				}
			case *[]int64:
				v = listCells(*p, func(x int64) any { return x })
			case *[]int32:
				v = listCells(*p, func(x int32) any { return int64(x) })
			case *[]float64:
				v = listCells(*p, func(x float64) any { return math.Float64bits(x) })
			}
			rows[i][c] = v
		}
	}
	return rows
}

func listCells[T any](vals []T, f func(T) any) any {
	if vals == nil {
		return nil
	}
	out := make([]any, len(vals))
	for i, x := range vals {
		out[i] = f(x)
	}
	return out
}

// writePQArrow writes reqs with arrow-go's own Parquet writer (pqarrow),
// with this package's writer properties, in row groups of the given
// sizes.
func writePQArrow(t *testing.T, reqs []*Request, groups []int64) []byte {
	t.Helper()
	rec := arrowRecord(reqs)
	defer rec.Release()
	var buf bytes.Buffer
	fw, err := pqarrow.NewFileWriter(Schema(), &buf, writerProperties(), pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
	if err != nil {
		t.Fatal(err)
	}
	var at int64
	for _, n := range groups {
		s := rec.NewSlice(at, at+n)
		if err := fw.Write(s); err != nil {
			t.Fatal(err)
		}
		s.Release()
		at += n
	}
	if err := fw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// A chunkFacts is what the footer says of one column chunk, beside its
// pages' sizes and offsets: what a reader relies on.
type chunkFacts struct {
	NumValues int64
	Codec     string
	Encodings []parquet.Encoding
	HasMinMax bool
	Min, Max  []byte
	Nulls     int64
	HasNulls  bool
}

func footerFacts(t *testing.T, data []byte) (groups []int64, facts [][]chunkFacts) {
	t.Helper()
	pf, err := file.NewParquetReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	md := pf.MetaData()
	for g := range md.NumRowGroups() {
		rg := md.RowGroup(g)
		groups = append(groups, rg.NumRows())
		var cols []chunkFacts
		for c := range rg.NumColumns() {
			cc, err := rg.ColumnChunk(c)
			if err != nil {
				t.Fatal(err)
			}
			f := chunkFacts{NumValues: cc.NumValues(), Codec: cc.Compression().String(), Encodings: cc.Encodings()}
			if set, _ := cc.StatsSet(); set {
				st, err := cc.Statistics()
				if err != nil {
					t.Fatal(err)
				}
				enc, err := st.Encode()
				if err != nil {
					t.Fatal(err)
				}
				f.HasMinMax, f.Min, f.Max = st.HasMinMax(), enc.Min, enc.Max
				f.HasNulls, f.Nulls = enc.HasNullCount, enc.NullCount
			}
			cols = append(cols, f)
		}
		facts = append(facts, cols)
	}
	return groups, facts
}

// The hand-written page and chunk encoder against arrow-go's writer: random
// records of every column, written by Writer and, in the same row groups
// with the same properties, by pqarrow, read back by arrow-go's generic
// reader to the same rows (the records' own values, NaN and −0 included,
// to the bit), with the same statistics, value counts, codec and
// encodings in the footer, and the same Arrow schema for Arrow readers.
func TestWriterMatchesPQArrow(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(seed, 12))
			reqs := randomRequests(rng, 800+rng.IntN(1500), true)
			var buf bytes.Buffer
			w, err := NewWriter(&buf)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range reqs {
				if err := w.Write(r); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			ours := buf.Bytes()
			groups, ourFacts := footerFacts(t, ours)
			if len(groups) < 2 {
				t.Fatalf("%d row groups; the test wants several", len(groups))
			}
			theirs := writePQArrow(t, reqs, groups)
			theirGroups, theirFacts := footerFacts(t, theirs)
			if !reflect.DeepEqual(groups, theirGroups) {
				t.Fatalf("row groups: ours %v, pqarrow's %v", groups, theirGroups)
			}
			for g := range ourFacts {
				for c := range ourFacts[g] {
					if !reflect.DeepEqual(ourFacts[g][c], theirFacts[g][c]) {
						t.Errorf("row group %d, column %s: ours %+v\npqarrow's %+v", g, columns[c].field.Name, ourFacts[g][c], theirFacts[g][c])
					}
				}
			}
			want := requestRows(reqs)
			for name, data := range map[string][]byte{"ours": ours, "pqarrow's": theirs} {
				got := tableRows(t, data)
				if len(got) != len(want) {
					t.Fatalf("%s: %d rows read back, %d written", name, len(got), len(want))
				}
				for i := range want {
					if !reflect.DeepEqual(got[i], want[i]) {
						for c := range want[i] {
							if !reflect.DeepEqual(got[i][c], want[i][c]) {
								t.Fatalf("%s file, row %d, column %s: read %v, wrote %v", name, i, columns[c].field.Name, got[i][c], want[i][c])
							}
						}
					}
				}
			}
			if a, b := arrowSchemaMeta(t, ours), arrowSchemaMeta(t, theirs); a != b {
				t.Errorf("ARROW:schema differs from pqarrow's:\n%s\n%s", a, b)
			}
		})
	}
}

func arrowSchemaMeta(t *testing.T, data []byte) string {
	t.Helper()
	pf, err := file.NewParquetReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	v := pf.MetaData().KeyValueMetadata().FindValue("ARROW:schema")
	if v == nil {
		t.Fatal("no ARROW:schema in the file's metadata")
	}
	return *v
}
