package trace

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// scanProjections are the column sets the equivalence tests read: all,
// the latency summary's, one list alone, and a mix of every kind.
var scanProjections = [][]string{
	nil,
	{"status", "input_tokens", "output_tokens", "ttft_s", "e2e_s", "itl_s"},
	{"itl_s"},
	{"run", "hash_ids", "chunk_tokens", "arrival_s", "decode_done_s", "turn", "itl_unit"},
}

// readerRows reads path with OpenFileColumns + Scan, the reference.
func readerRows(path string, names []string) ([]*Request, error) {
	r, err := OpenFileColumns(path, names...)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var out []*Request
	for r.Scan() {
		out = append(out, r.Request())
	}
	return out, r.Err()
}

// scanRows reads path with ScanColumns, keeping a deep copy of each row.
func scanRows(path string, names []string) ([]*Request, error) {
	var out []*Request
	err := ScanColumns(path, names, func(r *Request) error {
		out = append(out, r.Clone())
		return nil
	})
	return out, err
}

// sameRows checks that ScanColumns yields exactly what Reader yields:
// every field, nil and empty lists apart, and the row positions.
func sameRows(t *testing.T, path string, names []string) int {
	t.Helper()
	want, err := readerRows(path, names)
	if err != nil {
		t.Fatalf("%v: Reader: %v", names, err)
	}
	got, err := scanRows(path, names)
	if err != nil {
		t.Fatalf("%v: ScanColumns: %v", names, err)
	}
	if len(got) != len(want) {
		t.Fatalf("%v: ScanColumns read %d rows, Reader %d", names, len(got), len(want))
	}
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Fatalf("%v: row %d:\nscan   %s (pos %v)\nreader %s (pos %v)", names, i, got[i], pos(got[i]), want[i], pos(want[i]))
		}
	}
	return len(got)
}

func pos(r *Request) string { f, l := r.Pos(); return fmt.Sprintf("%s:%d", f, l) }

func TestScanColumnsSample(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.parquet")
	writeSample(t, path, sampleRequests(), sampleRuns())
	for _, names := range scanProjections {
		if n := sameRows(t, path, names); n != 3 {
			t.Errorf("%v: %d rows, want 3", names, n)
		}
	}
	// The sample's distinctions survive: an empty list is not a null
	// one, a zero is not an absent value.
	got, err := scanRows(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got[1].ITLSec == nil || len(got[1].ITLSec) != 0 || got[2].ITLSec != nil {
		t.Errorf("ITL lists read as %#v and %#v, want empty and nil", got[1].ITLSec, got[2].ITLSec)
	}
	if got[2].E2ESec.OK || !got[2].TTFTSec.OK {
		t.Errorf("absent/zero distinction lost: e2e %v ttft %v", got[2].E2ESec, got[2].TTFTSec)
	}
	for i, r := range sampleRequests() {
		if got[i].String() != r.String() {
			t.Errorf("row %d:\n got %s\nwant %s", i, got[i], r)
		}
	}
}

// variedRequests returns n valid requests with long, empty and null lists
// and present and absent values of every kind, deterministically.
func variedRequests(n int) []*Request {
	reqs := make([]*Request, n)
	statuses := []Status{StatusOK, StatusOK, StatusOK, StatusFailed, StatusTimeout}
	for i := range reqs {
		r := &Request{RequestID: "q" + itoa(i), Run: "run-" + itoa(i/700), Status: statuses[i%len(statuses)]}
		if i%3 != 0 {
			r.Worker = "w" + itoa(i%4)
			r.InputTokens, r.OutputTokens = Some(int64(100+i%257)), Some(int64(i%91))
			r.Arrival, r.DecodeDone = Some(Time(int64(i)*1_000_003)), Some(Time(int64(i)*1_000_003+7_654_321))
			r.TTFTSec = Some(float64(i%13) * 0.0123)
		}
		switch {
		case i%11 == 3: // null ITL
		case i%7 == 0:
			r.ITLSec = []float64{}
		default:
			r.ITLSec = make([]float64, (i*7919)%400)
			for k := range r.ITLSec {
				r.ITLSec[k] = float64(i%100)*1e-3 + float64(k)*1e-6
			}
			if i%9 == 2 {
				r.ChunkTokens = make([]int32, len(r.ITLSec)+1)
				for k := range r.ChunkTokens {
					r.ChunkTokens[k] = int32(1 + k%3)
				}
			}
		}
		if i%4 == 1 { // E2E covers TTFT and the gaps, as Validate wants
			e2e := 1.5 + float64(i)*1e-3 + r.TTFTSec.V
			for _, g := range r.ITLSec {
				e2e += g
			}
			r.E2ESec, r.Turn, r.ITLUnit = Some(e2e), Some(int64(i%6)), ITLToken
		}
		switch i % 6 {
		case 0:
			r.HashIDs, r.BlockSize = []int64{int64(i), int64(i) << 33, -1}, Some[int64](16)
		case 1:
			r.HashIDs = []int64{}
		}
		reqs[i] = r
	}
	return reqs
}

// TestScanColumnsRowGroups reads a few thousand requests spread over many
// row groups (the writer's list-value bound lowered), whose lists cross
// pages and row groups.
func TestScanColumnsRowGroups(t *testing.T) {
	defer func(v int) { rowGroupListValues = v }(rowGroupListValues)
	rowGroupListValues = 20_000
	path := filepath.Join(t.TempDir(), "rg.parquet")
	const n = 3000
	writeSample(t, path, variedRequests(n), nil)
	r, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	groups := r.pf.NumRowGroups()
	r.Close()
	if groups < 10 {
		t.Fatalf("%d row groups, want at least 10 for this test to mean something", groups)
	}
	for _, names := range scanProjections {
		if got := sameRows(t, path, names); got != n {
			t.Errorf("%v: %d rows, want %d", names, got, n)
		}
	}
}

// Scans may run at once (they share pools of buffers): each reads what
// a scan alone reads.
func TestScanColumnsConcurrent(t *testing.T) {
	defer func(v int) { rowGroupListValues = v }(rowGroupListValues)
	rowGroupListValues = 20_000
	path := filepath.Join(t.TempDir(), "rg.parquet")
	writeSample(t, path, variedRequests(1000), nil)
	want := make([][]*Request, len(scanProjections))
	for i, names := range scanProjections {
		var err error
		if want[i], err = readerRows(path, names); err != nil {
			t.Fatal(err)
		}
	}
	errs := make(chan error, 8)
	for g := range 8 {
		go func() {
			i := g % len(scanProjections)
			got, err := scanRows(path, scanProjections[i])
			if err == nil && !reflect.DeepEqual(got, want[i]) {
				err = fmt.Errorf("%v: a concurrent scan read other rows", scanProjections[i])
			}
			errs <- err
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// TestScanColumnsItemLists reads a file whose lists name their element
// "item", as pqarrow writes Arrow's default list type (older writers).
func TestScanColumnsItemLists(t *testing.T) {
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "request_id", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "status", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "ttft_s", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
		{Name: "itl_s", Type: arrow.ListOf(arrow.PrimitiveTypes.Float64), Nullable: true},
		{Name: "hash_ids", Type: arrow.ListOf(arrow.PrimitiveTypes.Int64), Nullable: true},
		{Name: "block_size", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	for i := range 50 {
		b.Field(0).(*array.StringBuilder).Append("r" + itoa(i))
		b.Field(1).(*array.StringBuilder).Append("ok")
		if i%4 == 0 {
			b.Field(2).AppendNull()
		} else {
			b.Field(2).(*array.Float64Builder).Append(float64(i) / 100)
		}
		itl := b.Field(3).(*array.ListBuilder)
		switch i % 3 {
		case 0:
			itl.AppendNull()
		case 1:
			itl.Append(true) // empty
		default:
			itl.Append(true)
			for k := range i {
				itl.ValueBuilder().(*array.Float64Builder).Append(float64(k) * 1e-3)
			}
		}
		h := b.Field(4).(*array.ListBuilder)
		h.Append(true)
		h.ValueBuilder().(*array.Int64Builder).Append(int64(i))
		b.Field(5).(*array.Int64Builder).Append(16)
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	if got := schema.Field(3).Type.(*arrow.ListType).ElemField().Name; got != "item" {
		t.Fatalf("Arrow's default list element is %q now; this test needs an \"item\" list", got)
	}
	var buf bytes.Buffer
	fw, err := pqarrow.NewFileWriter(schema, &buf,
		parquet.NewWriterProperties(parquet.WithCompression(compress.Codecs.Snappy), parquet.WithMaxRowGroupLength(16)),
		pqarrow.DefaultWriterProps())
	if err != nil {
		t.Fatal(err)
	}
	if err := fw.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := fw.AppendKeyValueMetadata(MetaSchemaVersion, SchemaVersion); err != nil {
		t.Fatal(err)
	}
	if err := fw.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "item.parquet")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, names := range [][]string{nil, {"itl_s"}, {"hash_ids", "ttft_s"}} {
		if got := sameRows(t, path, names); got != 50 {
			t.Errorf("%v: %d rows, want 50", names, got)
		}
	}
}

func TestScanColumnsErrors(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "x.parquet")
	writeSample(t, path, sampleRequests(), sampleRuns())
	none := func(*Request) error { return nil }

	err := ScanColumns(path, []string{"status", "no_such_column"}, none)
	if err == nil || !strings.Contains(err.Error(), `"no_such_column"`) {
		t.Errorf("unknown column: got %v, want an error naming it", err)
	}

	stop := errors.New("stop")
	calls := 0
	err = ScanColumns(path, nil, func(*Request) error { calls++; return stop })
	if !errors.Is(err, stop) || calls != 1 {
		t.Errorf("fn's error: got %v after %d calls, want it returned after 1", err, calls)
	}

	bad := filepath.Join(dir, "bad.parquet")
	os.WriteFile(bad, []byte("not parquet"), 0o644)
	if err := ScanColumns(bad, nil, none); err == nil || !strings.Contains(err.Error(), "not a Parquet file") {
		t.Errorf("got %v, want a not-a-Parquet-file error", err)
	}
	if err := ScanColumns(filepath.Join(dir, "missing.parquet"), nil, none); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: got %v", err)
	}

	// A Parquet file that is not opaltrace's, and one of another version.
	for _, c := range []struct{ version, want string }{{"", "not an opaltrace Parquet file"}, {"99", "schema version 99"}} {
		p := filepath.Join(dir, "v"+c.version+".parquet")
		writeVersioned(t, p, c.version)
		if err := ScanColumns(p, nil, none); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("version %q: got %v, want %q", c.version, err, c.want)
		}
	}
}

// writeVersioned writes a one-column Parquet file with the given schema
// version metadata ("" for none).
func writeVersioned(t *testing.T, path, version string) {
	t.Helper()
	schema := arrow.NewSchema([]arrow.Field{{Name: "status", Type: arrow.BinaryTypes.String, Nullable: true}}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	b.Field(0).(*array.StringBuilder).Append("ok")
	rec := b.NewRecordBatch()
	defer rec.Release()
	var buf bytes.Buffer
	fw, err := pqarrow.NewFileWriter(schema, &buf, parquet.NewWriterProperties(), pqarrow.DefaultWriterProps())
	if err != nil {
		t.Fatal(err)
	}
	if err := fw.Write(rec); err != nil {
		t.Fatal(err)
	}
	if version != "" {
		fw.AppendKeyValueMetadata(MetaSchemaVersion, version)
	}
	if err := fw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// The request and its slices are reused: appending to a list must not
// overwrite the next row's values, and a full scan validates.
func TestScanColumnsReuse(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.parquet")
	reqs := []*Request{
		{Run: "a", Status: StatusOK, ITLSec: []float64{1, 2}},
		{Run: "a", Status: StatusOK, ITLSec: []float64{3, 4}},
	}
	writeSample(t, path, reqs, nil)
	var seen [][]float64
	err := ScanColumns(path, []string{"itl_s"}, func(r *Request) error {
		r.ITLSec = append(r.ITLSec, 99)
		seen = append(seen, cloneSlice(r.ITLSec))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := [][]float64{{1, 2, 99}, {3, 4, 99}}; !reflect.DeepEqual(seen, want) {
		t.Errorf("lists read as %v, want %v", seen, want)
	}

	bad := filepath.Join(t.TempDir(), "bad.parquet")
	writeSample(t, bad, []*Request{reqs[0], {Run: "a", Status: StatusOK, TTFTSec: Some(-1.0)}}, nil)
	err = ScanColumns(bad, nil, func(*Request) error { return nil })
	if err == nil || !strings.Contains(err.Error(), bad+":2: ttft_s") {
		t.Errorf("invalid row: got %v, want %s:2: ttft_s: ...", err, bad)
	}
	if err := ScanColumns(bad, []string{"ttft_s"}, func(*Request) error { return nil }); err != nil {
		t.Errorf("a projection is not validated, as Reader does not: %v", err)
	}
}

// Every column of the schema points to a Request field of its own, the
// one its get fills.
func TestColumnPointers(t *testing.T) {
	var r Request
	seen := map[any]string{}
	for _, c := range columns {
		p := c.ptr(&r)
		if p == nil {
			t.Fatalf("column %s: no field pointer", c.field.Name)
		}
		if other, dup := seen[p]; dup {
			t.Errorf("columns %s and %s point to one field", other, c.field.Name)
		}
		seen[p] = c.field.Name
	}
}

// TestScanCorruptedParquet flips bytes all over a good file: every result
// is an error or what Reader reads, never a panic.
func TestScanCorruptedParquet(t *testing.T) {
	good := sampleFile(t)
	dir := t.TempDir()
	for i := 0; i < len(good); i += 61 {
		bad := append([]byte(nil), good...)
		bad[i] ^= 0xff
		path := filepath.Join(dir, "c.parquet")
		os.WriteFile(path, bad, 0o644)
		got, err := scanRows(path, nil) // must not panic
		if err != nil {
			continue
		}
		for _, r := range got {
			if err := r.Validate(); err != nil {
				t.Fatalf("byte %d: accepted an invalid request: %v", i, err)
			}
		}
	}
}

// FuzzScanColumns feeds corrupted Parquet files to ScanColumns: it must
// return an error, never panic, and whatever it hands out must validate.
func FuzzScanColumns(f *testing.F) {
	addParquetSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "f.parquet")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		ScanColumns(path, []string{"itl_s", "status"}, func(*Request) error { return nil })
		ScanColumns(path, nil, func(r *Request) error {
			if err := r.Validate(); err != nil {
				t.Fatalf("handed out an invalid request: %v", err)
			}
			return nil
		})
	})
}

// BenchmarkScanColumns reads the six columns a latency summary needs, as
// BenchmarkReadParquetColumns does with Reader.
func BenchmarkScanColumns(b *testing.B) {
	const n = 200_000
	path := benchFile(b, n, 20)
	names := []string{"status", "input_tokens", "output_tokens", "ttft_s", "e2e_s", "itl_s"}
	b.ResetTimer()
	for b.Loop() {
		rows, gaps := 0, 0
		err := ScanColumns(path, names, func(r *Request) error {
			rows++
			gaps += len(r.ITLSec)
			return nil
		})
		if err != nil || rows != n || gaps != 20*n {
			b.Fatal(err, rows, gaps)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/row")
}
