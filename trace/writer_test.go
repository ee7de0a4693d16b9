package trace

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// listHeavy returns n requests whose ITL lists (lengths 0 to 299, some
// nil, some empty) together exceed several row groups' worth of list
// values, and whose hash_ids are null on most rows.
func listHeavy(n int) []*Request {
	reqs := make([]*Request, n)
	for i := range reqs {
		r := &Request{RequestID: "r" + itoa(i), Run: "r", Status: StatusOK, InputTokens: Some(int64(i))}
		switch {
		case i%11 == 3:
			// no ITL: null
		case i%7 == 0:
			r.ITLSec = []float64{}
		default:
			r.ITLSec = make([]float64, (i*7919)%300)
			for k := range r.ITLSec {
				r.ITLSec[k] = float64(i) + float64(k)*1e-6
			}
		}
		if i%5 == 0 {
			r.HashIDs, r.BlockSize = []int64{int64(i), int64(i + 1)}, Some[int64](16)
		}
		reqs[i] = r
	}
	return reqs
}

func writeAll(t *testing.T, reqs []*Request, o WriterOptions) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewWriterWith(&buf, o)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reqs {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	w.SetRuns([]Run{{Name: "r", Source: "simulated"}})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// A row group closes when its lists hold rowGroupListValues values, not
// only at RowGroupRows rows; lists, nulls and empties survive the
// boundaries; and the concurrent writer writes the same bytes.
func TestWriterListBoundedRowGroups(t *testing.T) {
	defer func(n int) { rowGroupListValues = n }(rowGroupListValues)
	rowGroupListValues = 100_000
	reqs := listHeavy(9000)
	var values int
	for _, r := range reqs {
		values += len(r.ITLSec) + len(r.HashIDs)
	}
	data := writeAll(t, reqs, WriterOptions{})
	if conc := writeAll(t, reqs, WriterOptions{Concurrent: true}); !bytes.Equal(conc, data) {
		t.Fatalf("concurrent writer wrote %d bytes, the plain one %d, not the same", len(conc), len(data))
	}
	pf, err := file.NewParquetReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	// The first row groups ramp up: 1/32 of the bound, 1/16, ... 1.
	want := 0
	for rem, shift := values, 5; rem > 0; want++ {
		rem -= rowGroupListValues >> shift
		shift = max(shift-1, 0)
	}
	if got := pf.NumRowGroups(); got < want-1 || got > want+1 {
		t.Errorf("%d row groups for %d list values, want about %d", got, values, want)
	}
	path := filepath.Join(t.TempDir(), "lists.parquet")
	writeSample(t, path, reqs, nil)
	_, got, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(reqs) {
		t.Fatalf("read %d rows, wrote %d", len(got), len(reqs))
	}
	for i, r := range got {
		if !reflect.DeepEqual(r.ITLSec, reqs[i].ITLSec) || !reflect.DeepEqual(r.HashIDs, reqs[i].HashIDs) {
			t.Fatalf("row %d: lists read back as itl %d values (nil %v), hash_ids %v; wrote %d (nil %v), %v",
				i, len(r.ITLSec), r.ITLSec == nil, r.HashIDs, len(reqs[i].ITLSec), reqs[i].ITLSec == nil, reqs[i].HashIDs)
		}
	}
}

type failingWriter struct{ after int }

func (f *failingWriter) Write(p []byte) (int, error) {
	if f.after -= len(p); f.after < 0 {
		return 0, errors.New("disk full")
	}
	return len(p), nil
}

// An error of the concurrent encoder reaches the caller, from a later
// Write or from Close, and Write never blocks on a failed encoder.
func TestConcurrentWriterError(t *testing.T) {
	w, err := NewWriterWith(&failingWriter{after: 1 << 16}, WriterOptions{Concurrent: true})
	if err != nil {
		t.Fatal(err)
	}
	var werr error
	for _, r := range listHeavy(20000) {
		if werr = w.Write(r); werr != nil {
			break
		}
	}
	cerr := w.Close()
	if werr == nil && cerr == nil {
		t.Fatal("no error from a sink that fails")
	}
	for _, err := range []error{werr, cerr} {
		if err != nil && !bytes.Contains([]byte(err.Error()), []byte("disk full")) {
			t.Errorf("error %v does not say what failed", err)
		}
	}
}

// Write copies what it needs, with or without Concurrent: a caller may
// reuse one Request (and its lists) for every row.
func TestWriterCallerReusesRequest(t *testing.T) {
	defer func(n int) { rowGroupListValues = n }(rowGroupListValues)
	rowGroupListValues = 50_000
	reqs := listHeavy(3000)
	want := writeAll(t, reqs, WriterOptions{})
	for _, o := range []WriterOptions{{}, {Concurrent: true}} {
		var buf bytes.Buffer
		w, err := NewWriterWith(&buf, o)
		if err != nil {
			t.Fatal(err)
		}
		var r Request
		itl := make([]float64, 0, 300)
		for _, q := range reqs {
			r = *q
			if q.ITLSec != nil {
				itl = append(itl[:0], q.ITLSec...)
				r.ITLSec = itl
			}
			if err := w.Write(&r); err != nil {
				t.Fatal(err)
			}
			// Scribble over what was written.
			r.RequestID, r.InputTokens = "scribbled", Some[int64](-1)
			for k := range itl {
				itl[k] = -1
			}
		}
		w.SetRuns([]Run{{Name: "r", Source: "simulated"}})
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf.Bytes(), want) {
			t.Errorf("concurrent %v: the file changed when the caller reused its Request", o.Concurrent)
		}
	}
}

// TestWriterSharedLists checks that a Writer keeping the requests' lists
// (WriterOptions.SharedLists) writes the bytes of one copying them, with
// and without concurrency: over row group and page boundaries (small
// bounds), with nulls and empty lists.
func TestWriterSharedLists(t *testing.T) {
	defer func(n int) { rowGroupListValues = n }(rowGroupListValues)
	rowGroupListValues = 20_000
	rng := rand.New(rand.NewPCG(3, 14))
	reqs := append(listHeavy(3000), randomRequests(rng, 400, true)...)
	want := writeAll(t, reqs, WriterOptions{})
	for _, o := range []WriterOptions{{SharedLists: true}, {SharedLists: true, Concurrent: true}} {
		if got := writeAll(t, reqs, o); !bytes.Equal(got, want) {
			t.Errorf("%+v: wrote %d bytes, a copying writer %d, not the same", o, len(got), len(want))
		}
	}
}

// TestListRowsStatistics checks that statistics updated list by list
// (listRows) are those of one update over the lists' concatenation
// (flatList), with values whose order could matter: NaN, ±0, ±Inf, lists
// of only NaN or only zeros of either sign. (The writer keeps no
// statistics of list elements today; a column that did would get them.)
func TestListRowsStatistics(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 15))
	negZero := math.Copysign(0, -1)
	special := []float64{math.NaN(), negZero, 0, math.Inf(1), math.Inf(-1), 1.5, -2}
	sc, err := pqarrow.ToParquet(Schema(), writerProperties(), pqarrow.DefaultWriterProps())
	if err != nil {
		t.Fatal(err)
	}
	col := sc.Column(itlColumn)
	for trial := range 2000 {
		lists := make([][]float64, rng.IntN(6))
		var flat []float64
		nulls := 0
		for i := range lists {
			switch rng.IntN(5) {
			case 0:
				nulls++ // a null or empty row
				continue
			}
			lists[i] = make([]float64, 1+rng.IntN(4))
			for k := range lists[i] {
				lists[i][k] = special[rng.IntN(len(special))]
			}
			flat = append(flat, lists[i]...)
		}
		byList := metadata.NewStatistics(col, nil)
		listRows[float64](lists).updateStats(byList, nulls)
		whole := metadata.NewStatistics(col, nil)
		flatList[float64](flat).updateStats(whole, nulls)
		if byList.HasMinMax() != whole.HasMinMax() || byList.NullCount() != whole.NullCount() || byList.NumValues() != whole.NumValues() ||
			!bytes.Equal(byList.EncodeMin(), whole.EncodeMin()) || !bytes.Equal(byList.EncodeMax(), whole.EncodeMax()) {
			t.Fatalf("trial %d: lists %v: list by list min %x max %x nulls %d values %d; whole min %x max %x nulls %d values %d",
				trial, lists, byList.EncodeMin(), byList.EncodeMax(), byList.NullCount(), byList.NumValues(),
				whole.EncodeMin(), whole.EncodeMax(), whole.NullCount(), whole.NumValues())
		}
	}
}

// TestPrewarmSameBytes: a Writer whose ITL compressor Prewarm readied
// writes the bytes of one that made its own, and a second Prewarm before
// a Writer takes the first readies no other.
func TestPrewarmSameBytes(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 9))
	reqs := append(listHeavy(2000), randomRequests(rng, 300, true)...)
	want := writeAll(t, reqs, WriterOptions{})
	Prewarm()
	warm.Lock()
	first := warm.itl
	warm.Unlock()
	Prewarm()
	warm.Lock()
	second := warm.itl
	warm.Unlock()
	if first == nil || second != first {
		t.Fatalf("Prewarm twice: pagers %p then %p, want one", first, second)
	}
	if got := writeAll(t, reqs, WriterOptions{Concurrent: true, SharedLists: true}); !bytes.Equal(got, want) {
		t.Errorf("after Prewarm: wrote %d bytes, without %d, not the same", len(got), len(want))
	}
	warm.Lock()
	defer warm.Unlock()
	if warm.itl == first {
		t.Error("the Writer did not take the prewarmed pager")
	}
}
