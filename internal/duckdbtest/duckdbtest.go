// Package duckdbtest runs SQL with DuckDB (testtools/duckdb-query.mjs) for
// tests: DuckDB is an independent reader of the Parquet files opaltrace
// writes; if it sees our names, types and values, so will pandas and
// Spark.
package duckdbtest

import (
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// Query runs sql and returns the rows. Missing node or DuckDB skips the
// test, except under CI=true, where it fails.
func Query(t testing.TB, sql string) []map[string]any {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	tools := filepath.Join(filepath.Dir(file), "..", "..", "testtools")
	script := filepath.Join(tools, "duckdb-query.mjs")
	_, errMod := os.Stat(filepath.Join(tools, "node_modules", "@duckdb", "node-api"))
	node, errNode := exec.LookPath("node")
	if errMod != nil || errNode != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("DuckDB not installed (run `npm ci` in testtools): %v %v", errMod, errNode)
		}
		t.Skipf("DuckDB not installed (run `npm ci --prefix testtools`): %v %v", errMod, errNode)
	}
	out, err := exec.Command(node, script, sql).CombinedOutput()
	if err != nil {
		t.Fatalf("duckdb %q: %v\n%s", sql, err, out)
	}
	var rows []map[string]any
	if err := json.Unmarshal(out, &rows); err != nil {
		t.Fatalf("duckdb output %q: %v", out, err)
	}
	return rows
}

// Number reads a number from DuckDB's JSON rows, which write big integers
// as strings; NaN when v is neither (null, say).
func Number(v any) float64 {
	switch x := v.(type) {
	case float64:
		return x
	case string:
		var f float64
		if err := json.Unmarshal([]byte(x), &f); err != nil {
			return math.NaN()
		}
		return f
	}
	return math.NaN()
}
