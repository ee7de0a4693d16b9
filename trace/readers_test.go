package trace

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
)

// hyparquet reads path with hyparquet (testtools/hyparquet-read.mjs) and
// returns the file's created_by and its rows. Missing node or hyparquet
// skips the test, except under CI=true, where it fails.
func hyparquet(t *testing.T, path string) (createdBy string, rows []map[string]any) {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	tools := filepath.Join(filepath.Dir(file), "..", "testtools")
	_, errMod := os.Stat(filepath.Join(tools, "node_modules", "hyparquet-compressors"))
	node, errNode := exec.LookPath("node")
	if errMod != nil || errNode != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("hyparquet not installed (run `npm ci` in testtools): %v %v", errMod, errNode)
		}
		t.Skipf("hyparquet not installed (run `npm ci --prefix testtools`): %v %v", errMod, errNode)
	}
	out, err := exec.Command(node, filepath.Join(tools, "hyparquet-read.mjs"), path).Output()
	if err != nil {
		t.Fatalf("hyparquet %s: %v", path, err)
	}
	var doc struct {
		CreatedBy string           `json:"created_by"`
		Rows      []map[string]any `json:"rows"`
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("hyparquet output: %v", err)
	}
	return doc.CreatedBy, doc.Rows
}

// duckdbRows reads every row of path with DuckDB, in file order, numbers
// kept as JSON wrote them.
func duckdbRows(t *testing.T, path string) []map[string]any {
	t.Helper()
	rows := duckdb(t, fmt.Sprintf("SELECT * FROM '%s'", path))
	// duckdbtest decodes numbers as float64, which would round int64s:
	// DuckDB writes those as strings, doubles as shortest round-trip
	// decimals, so float64 loses nothing of a double.
	return rows
}

// jsonCell turns a reader's JSON value of column c into tableRows' cells,
// with NaN as "NaN" (readers do not keep a NaN's payload). zeroSign false:
// the reader prints −0 as 0, so −0 is compared as 0.
func jsonCell(t *testing.T, typ arrow.DataType, v any, zeroSign bool) any {
	t.Helper()
	if v == nil {
		return nil
	}
	switch typ.ID() {
	case arrow.STRING:
		return v
	case arrow.INT64, arrow.INT32:
		var s string
		switch x := v.(type) {
		case string:
			s = x
		case json.Number:
			s = x.String()
		case float64:
			if x != math.Trunc(x) || math.Abs(x) > 1<<53 {
				t.Fatalf("integer read as %v", x)
			}
			return int64(x)
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("integer read as %q: %v", s, err)
		}
		return n
	case arrow.FLOAT64:
		var f float64
		switch x := v.(type) {
		case string:
			switch x {
			case "NaN":
				return "NaN"
			case "Infinity":
				f = math.Inf(1)
			case "-Infinity":
				f = math.Inf(-1)
			case "-0":
				f = math.Copysign(0, -1)
			default:
				t.Fatalf("double read as %q", x)
			}
		case json.Number:
			var err error
			if f, err = strconv.ParseFloat(x.String(), 64); err != nil {
				t.Fatalf("double read as %q: %v", x, err)
			}
		case float64:
			f = x
		}
		return floatCell(f, zeroSign)
	case arrow.LIST:
		elem := typ.(*arrow.ListType).Elem()
		out := []any{}
		for _, e := range v.([]any) {
			out = append(out, jsonCell(t, elem, e, zeroSign))
		}
		return out
	}
	t.Fatalf("no cell for %s", typ)
	return nil
}

func floatCell(f float64, zeroSign bool) any {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case f == 0 && !zeroSign:
		return uint64(0)
	}
	return math.Float64bits(f)
}

// canonical rewrites requestRows' cells as jsonCell makes them.
func canonical(typ arrow.DataType, v any, zeroSign bool) any {
	switch x := v.(type) {
	case uint64:
		return floatCell(math.Float64frombits(x), zeroSign)
	case []any:
		elem := typ.(*arrow.ListType).Elem()
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = canonical(elem, e, zeroSign)
		}
		return out
	}
	return v
}

// Three independent readers, arrow-go (pqarrow),
// DuckDB (C++) and hyparquet (JavaScript), read random records of every
// column from a file of several row groups back to the values written:
// strings, int64 extremes, NaN, infinities, subnormals and −0 (but for
// DuckDB, whose JSON prints it as 0), null, empty and long lists.
func TestThreeReadersRandomRecords(t *testing.T) {
	for _, seed := range []uint64{4, 5} {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(seed, 3))
			reqs := randomRequests(rng, 300+rng.IntN(300), true)
			path := filepath.Join(t.TempDir(), "random.parquet")
			data := writeAll(t, reqs, WriterOptions{Concurrent: seed%2 == 0})
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			if groups, _ := footerFacts(t, data); len(groups) < 2 {
				t.Fatalf("%d row groups; the test wants several", len(groups))
			}
			want := requestRows(reqs)

			// arrow-go's generic reader (pqarrow): this package's
			// Reader and ScanColumns validate requests, which random
			// ones are not.
			if !reflect.DeepEqual(tableRows(t, data), want) {
				t.Error("arrow-go reads other rows than were written")
			}

			compareJSONRows(t, "DuckDB", duckdbRows(t, path), want, false)
			createdBy, hyRows := hyparquet(t, path) // last: it may skip
			if createdBy != CreatedBy {
				t.Errorf("hyparquet reads created_by %q, want %q", createdBy, CreatedBy)
			}
			compareJSONRows(t, "hyparquet", hyRows, want, true)
		})
	}
}

func compareJSONRows(t *testing.T, reader string, rows []map[string]any, want [][]any, zeroSign bool) {
	t.Helper()
	if len(rows) != len(want) {
		t.Fatalf("%s reads %d rows, %d written", reader, len(rows), len(want))
	}
	for i, row := range rows {
		for c, col := range columns {
			v, ok := row[col.field.Name]
			if !ok {
				t.Fatalf("%s: row %d has no column %s", reader, i, col.field.Name)
			}
			got := jsonCell(t, col.field.Type, v, zeroSign)
			exp := canonical(col.field.Type, want[i][c], zeroSign)
			if !reflect.DeepEqual(got, exp) {
				t.Fatalf("%s: row %d, column %s: read %v, wrote %v", reader, i, col.field.Name, got, exp)
			}
		}
	}
}
