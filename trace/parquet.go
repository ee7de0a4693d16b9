package trace

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// File key/value metadata keys.
const (
	MetaRuns          = "opaltrace.runs"           // JSON array of Run
	MetaSchemaVersion = "opaltrace.schema_version" // SchemaVersion
	MetaTraceStart    = "trace_start_unix_ns"      // wall-clock time of t=0, when the source had one
)

// SchemaVersion is the version of the Parquet layout this package writes.
const SchemaVersion = "1"

// A Reader streams Requests out of a Parquet file written by Writer, one
// row group at a time.
type Reader struct {
	f  *os.File
	pf *file.Reader
	rr pqarrow.RecordReader

	rec  arrow.RecordBatch
	cols []int // index into columns for each record column, -1 if unknown
	row  int   // within rec
	n    int64 // rows read so far
	cur  *Request
	err  error
	name string
	// partial: only some columns are read, so records are not complete
	// enough to Validate (a projection without status, say).
	partial bool
}

// OpenFile opens a Parquet file for reading.
func OpenFile(path string) (*Reader, error) { return OpenFileColumns(path) }

// OpenFileColumns opens a Parquet file reading only the named columns (all
// when none are named): the other fields of every Request stay absent.
// Analyses that need a few columns of a large file read several times
// faster this way. An unknown column name is an error.
func OpenFileColumns(path string, names ...string) (*Reader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	r, err := newReader(f, path, names)
	if err != nil {
		f.Close()
		return nil, err
	}
	r.f = f
	return r, nil
}

// corrupt turns a panic inside the Parquet library, which it raises on
// some corrupted files, into an error naming the file.
func corrupt(name string, err *error) {
	if p := recover(); p != nil {
		*err = fmt.Errorf("%s: corrupt Parquet file: %v", name, p)
	}
}

func newReader(src parquet.ReaderAtSeeker, name string, only []string) (r *Reader, err error) {
	defer corrupt(name, &err)
	pf, err := file.NewParquetReader(src)
	if err != nil {
		return nil, fmt.Errorf("%s: not a Parquet file: %w", name, err)
	}
	r = &Reader{pf: pf, name: name}
	if _, err = fileRuns(pf, name); err != nil { // the version, and runs metadata that parses
		pf.Close()
		return nil, err
	}
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: RowGroupRows}, memory.DefaultAllocator)
	if err != nil {
		pf.Close()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	var indices []int
	if len(only) > 0 {
		sc, err := fr.Schema()
		if err != nil {
			pf.Close()
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		for _, col := range only {
			i := sc.FieldIndices(col)
			if len(i) == 0 {
				pf.Close()
				return nil, fmt.Errorf("%s: no column %q", name, col)
			}
			indices = append(indices, i[0])
		}
	}
	rr, err := fr.GetRecordReader(context.Background(), indices, nil)
	if err != nil {
		pf.Close()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	r.rr = rr
	r.partial = len(indices) > 0
	byName := make(map[string]int, len(columns))
	for i, c := range columns {
		byName[c.field.Name] = i
	}
	for _, f := range rr.Schema().Fields() {
		i, ok := byName[f.Name]
		if !ok {
			i = -1 // a column from a newer minor layout: ignored
		}
		r.cols = append(r.cols, i)
	}
	return r, nil
}

// checkVersion reports an error unless pf is an opaltrace Parquet file of
// the layout this build reads.
func checkVersion(pf *file.Reader, name string) error {
	if v := pf.MetaData().KeyValueMetadata().FindValue(MetaSchemaVersion); v == nil {
		return fmt.Errorf("%s: not an opaltrace Parquet file (no %s metadata)", name, MetaSchemaVersion)
	} else if *v != SchemaVersion {
		return fmt.Errorf("%s: opaltrace schema version %s, this build reads %s", name, *v, SchemaVersion)
	}
	return nil
}

// fileRuns returns the runs of an opaltrace Parquet file, or an error when
// the file is not one this build reads.
func fileRuns(pf *file.Reader, name string) ([]Run, error) {
	if err := checkVersion(pf, name); err != nil {
		return nil, err
	}
	var runs []Run
	if s := pf.MetaData().KeyValueMetadata().FindValue(MetaRuns); s != nil && *s != "" {
		if err := json.Unmarshal([]byte(*s), &runs); err != nil {
			return nil, fmt.Errorf("%s: %s metadata: %w", name, MetaRuns, err)
		}
	}
	return runs, nil
}

// ReadRuns returns the runs an opaltrace Parquet file stores and its
// number of requests, reading its footer only.
func ReadRuns(path string) (runs []Run, rows int64, err error) {
	defer corrupt(path, &err)
	pf, err := file.OpenParquetFile(path, false)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: not a Parquet file: %w", path, err)
	}
	defer pf.Close()
	runs, err = fileRuns(pf, path)
	return runs, pf.NumRows(), err
}

// NumRows returns the number of requests in the file.
func (r *Reader) NumRows() int64 { return r.pf.NumRows() }

// Scan advances to the next request. It returns false at the end or on an
// error (see Err).
func (r *Reader) Scan() (ok bool) {
	if r.err != nil {
		return false
	}
	defer func() {
		if p := recover(); p != nil {
			r.err = fmt.Errorf("%s: corrupt Parquet file: %v", r.name, p)
			ok = false
		}
	}()
	for r.rec == nil || r.row >= int(r.rec.NumRows()) {
		if !r.rr.Next() {
			if err := r.rr.Err(); err != nil && err != io.EOF {
				r.err = fmt.Errorf("%s: %w", r.name, err)
			}
			return false
		}
		r.rec = r.rr.RecordBatch()
		r.row = 0
	}
	req := &Request{}
	for j, ci := range r.cols {
		if ci >= 0 {
			columns[ci].get(r.rec.Column(j), r.row, req)
		}
	}
	r.row++
	r.n++
	req.SetPos(r.name, int(r.n))
	if r.partial {
		r.cur = req
		return true
	}
	if err := req.Validate(); err != nil {
		r.err = fmt.Errorf("%s:%d: %w", r.name, r.n, err)
		return false
	}
	r.cur = req
	return true
}

// Request returns the current request. It is the caller's to keep.
func (r *Reader) Request() *Request { return r.cur }

// Err returns the first error met.
func (r *Reader) Err() error { return r.err }

// Close releases the file.
func (r *Reader) Close() error {
	r.rr.Release()
	err := r.pf.Close()
	if r.f != nil {
		r.f.Close()
	}
	return err
}

// ReadFile reads a whole Parquet file: its runs and every request.
//
// Note: the requests are scanned (ScanColumns) and cloned rather than read
// through Reader, whose Arrow record batches grew their list buffers by
// reallocation: loading 100,000 simulated requests (2·10⁷ ITL gaps) took
// 3.4 s that way.
func ReadFile(path string) ([]Run, []*Request, error) {
	runs, n, err := ReadRuns(path)
	if err != nil {
		return nil, nil, err
	}
	reqs := make([]*Request, 0, min(n, 1<<20)) // the footer may lie
	err = ScanColumns(path, nil, func(q *Request) error {
		reqs = append(reqs, q.Clone())
		return nil
	})
	return runs, reqs, err
}
