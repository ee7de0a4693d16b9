package trace

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/metadata"
)

// pagesRequests returns n requests whose ITL lists fill several pages of
// one row group, with null and empty lists among them; whose sessions
// are long and unique (more distinct bytes than a dictionary takes);
// whose errors, on every other row, are longer still (pages of strings);
// whose TTFTs are null on every third row; and whose workers are one of
// five.
func pagesRequests(n int) []*Request {
	reqs := make([]*Request, n)
	for i := range reqs {
		r := &Request{
			RequestID: fmt.Sprintf("p%d", i), Run: "pages", Status: StatusOK,
			Worker:  fmt.Sprintf("w%d", i%5),
			Session: fmt.Sprintf("session-%06d-%s", i, strings.Repeat("x", 600)),
		}
		if i%3 != 0 {
			r.TTFTSec = Some(0.001 * float64(i))
		}
		if i%2 == 1 {
			// Long, distinct: several pages of PLAIN strings.
			r.Error = fmt.Sprintf("error %d: %s", i, strings.Repeat("e", 6000))
		}
		switch {
		case i%13 == 5:
			// null list
		case i%17 == 0:
			r.ITLSec = []float64{}
		default:
			r.ITLSec = make([]float64, 100+(i*37)%900)
			for k := range r.ITLSec {
				r.ITLSec[k] = float64(i)*1e-3 + float64(k)*1e-7
			}
		}
		reqs[i] = r
	}
	return reqs
}

// The writer's own encoding (pqchunk.go): a list spread over several
// pages of a row group, a string column past the dictionary limit
// (PLAIN), dictionaries of a few strings, nulls among values, and the
// chunk statistics, read back by arrow-go and by DuckDB.
func TestWriterPagesAndDictionaries(t *testing.T) {
	defer func(n int) { rowGroupListValues = n }(rowGroupListValues)
	rowGroupListValues = 1 << 27 // row groups bounded by rows
	reqs := pagesRequests(4000)
	var values, lists int
	for _, r := range reqs {
		values += len(r.ITLSec)
		if r.ITLSec != nil {
			lists++
		}
	}
	path := filepath.Join(t.TempDir(), "pages.parquet")
	writeSample(t, path, reqs, nil)

	_, got, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(reqs) {
		t.Fatalf("read %d rows, wrote %d", len(got), len(reqs))
	}
	for i, r := range got {
		want := *reqs[i]
		want.SetPos(path, i+1)
		if !reflect.DeepEqual(*r, want) {
			t.Fatalf("row %d read back as\n%s\nwrote\n%s", i, r, &want)
		}
	}

	pf, err := file.OpenParquetFile(path, false)
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	// The first row group is 2,048 rows (the writer's ramp), some
	// million list values.
	rg := pf.RowGroup(0)
	md := rg.MetaData()
	if md.NumRows() != RowGroupRows>>5 {
		t.Fatalf("first row group of %d rows, want %d", md.NumRows(), RowGroupRows>>5)
	}
	col := func(name string) (int, *metadata.ColumnChunkMetaData) {
		i := pf.MetaData().Schema.ColumnIndexByName(name)
		c, err := md.ColumnChunk(i)
		if err != nil {
			t.Fatal(err)
		}
		return i, c
	}
	rgValues := 0
	for _, r := range reqs[:md.NumRows()] {
		rgValues += len(r.ITLSec)
	}
	pagesOf := func(i int) int {
		pr, err := rg.GetColumnPageReader(i)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for pr.Next() {
			n++
		}
		return n
	}
	i, itl := col("itl_s.list.element")
	if pages, want := pagesOf(i), rgValues*8/dataPageSize; pages < want || pages < 2 {
		t.Errorf("itl_s: %d pages for %d values, want at least %d", pages, rgValues, max(want, 2))
	}
	if itl.NumValues() < int64(rgValues) {
		t.Errorf("itl_s: %d levels for %d values", itl.NumValues(), rgValues)
	}
	si, s := col("session")
	if s.HasDictionaryPage() {
		t.Error("session: dictionary-encoded past the dictionary limit")
	}
	if pages := pagesOf(si); pages != 1 {
		t.Errorf("session: %d pages of 1.3 MB of strings, want 1", pages)
	}
	if ei, _ := col("error"); pagesOf(ei) < 2 {
		t.Errorf("error: %d pages of 6 MB of strings, want 2 or more", pagesOf(ei))
	}
	_, worker := col("worker")
	if !worker.HasDictionaryPage() {
		t.Error("worker: five strings not dictionary-encoded")
	}
	if st, err := worker.Statistics(); err != nil || st == nil {
		t.Errorf("worker: statistics %v, %v", st, err)
	} else if s := st.(*metadata.ByteArrayStatistics); string(s.Min()) != "w0" || string(s.Max()) != "w4" || s.NullCount() != 0 {
		t.Errorf("worker: statistics min %q max %q nulls %d, want w0, w4, 0", s.Min(), s.Max(), s.NullCount())
	}
	_, ttft := col("ttft_s")
	if st, err := ttft.Statistics(); err != nil || st == nil {
		t.Errorf("ttft_s: statistics %v, %v", st, err)
	} else if s := st.(*metadata.Float64Statistics); s.Min() != 0.001 || s.Max() != 0.001*2047 || s.NullCount() != 683 {
		t.Errorf("ttft_s: statistics min %v max %v nulls %d, want 0.001, 2.047, 683", s.Min(), s.Max(), s.NullCount())
	}
	for _, e := range worker.Encodings() {
		if e != parquet.Encodings.RLEDict && e != parquet.Encodings.Plain && e != parquet.Encodings.RLE {
			t.Errorf("worker: encoding %s", e)
		}
	}

	// DuckDB: the same counts and sums, and filters that its use of the
	// statistics would get wrong if they were.
	q := "'" + path + "'"
	rows := duckdb(t, "SELECT count(*) AS n, count(itl_s) AS lists, sum(len(itl_s)) AS gaps, "+
		"count(DISTINCT session) AS sessions, count(DISTINCT worker) AS workers, count(ttft_s) AS ttfts, "+
		"count(error) AS errors, sum(length(error)) AS error_bytes, "+
		"sum(list_sum(itl_s)) AS itl_sum FROM "+q)
	r := rows[0]
	var itlSum float64
	var errorBytes int
	for _, q := range reqs {
		for _, v := range q.ITLSec {
			itlSum += v
		}
		errorBytes += len(q.Error)
	}
	for k, want := range map[string]float64{"n": 4000, "lists": float64(lists), "gaps": float64(values),
		"sessions": 4000, "workers": 5, "ttfts": 4000 - 1334, "errors": 2000, "error_bytes": float64(errorBytes)} {
		if got := jsonNumber(r[k]); got != want {
			t.Errorf("DuckDB %s = %v, want %v", k, r[k], want)
		}
	}
	if got := jsonNumber(r["itl_sum"]); math.Abs(got-itlSum) > 1e-6*itlSum {
		t.Errorf("DuckDB sum of ITL gaps %v, want %v", got, itlSum)
	}
	rows = duckdb(t, "SELECT count(*) AS n FROM "+q+" WHERE ttft_s >= 3.998 OR worker = 'w4'")
	if got := jsonNumber(rows[0]["n"]); got != 801 {
		t.Errorf("DuckDB: %v rows with ttft_s ≥ 3.998 or worker w4, want 801 (800 of w4, and row 3998)", rows[0]["n"])
	}
}

// An all-null column is a page of levels alone; a file of no rows is a
// footer alone: both read back.
func TestWriterEmptyAndNullColumns(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.parquet")
	writeSample(t, empty, nil, nil)
	if _, got, err := ReadFile(empty); err != nil || len(got) != 0 {
		t.Errorf("empty file: %d rows, %v", len(got), err)
	}
	one := filepath.Join(dir, "one.parquet")
	in := []*Request{{RequestID: "a", Status: StatusOK}}
	writeSample(t, one, in, nil)
	_, got, err := ReadFile(one)
	if err != nil || len(got) != 1 || got[0].RequestID != "a" || got[0].ITLSec != nil || got[0].TTFTSec.OK || got[0].Run != "" {
		t.Fatalf("one row with null columns read back as %v, %v", got, err)
	}
	data, err := os.ReadFile(one)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(data, magic) || !bytes.HasSuffix(data, magic) {
		t.Error("file does not begin and end with PAR1")
	}
}

// TestMaxPageHeader: no page header is longer than maxPageHeader, and
// growBytes keeps what it is given and makes the room asked for.
func TestMaxPageHeader(t *testing.T) {
	for _, typ := range []int32{pageData, pageDictionary} {
		h := appendPageHeader(nil, typ, math.MaxInt32, math.MaxInt32, math.MaxInt32, math.MinInt32)
		if len(h) > maxPageHeader {
			t.Errorf("page type %d: a header of %d bytes, maxPageHeader %d", typ, len(h), maxPageHeader)
		}
	}
	b := []byte("abc")
	for _, n := range []int{0, 1, 5, 1 << 20} {
		g := growBytes(b, n)
		if string(g) != "abc" || cap(g)-len(g) < n || cap(g) != cap(b) && cap(g) < len(b)+max(n, cap(b)) {
			t.Fatalf("growBytes(%q, %d): %q, cap %d", b, n, g, cap(g))
		}
		b = g
	}
}

// TestAppendRow: appendRow appends as append does, doubling a full slice
// (at least 64), across the sizes it maps with one madvise.
func TestAppendRow(t *testing.T) {
	var s []int64
	var want []int64
	for i := range int64(20000) {
		c := cap(s)
		s = appendRow(s, i)
		want = append(want, i)
		if c > 0 && len(s) == c+1 && cap(s) != 2*c {
			t.Fatalf("grown from %d to %d, want %d", c, cap(s), 2*c)
		}
	}
	if !reflect.DeepEqual(s, want) || cap(appendRow([]int16(nil), 1)) != 64 {
		t.Fatal("appendRow does not append as append does")
	}
}
