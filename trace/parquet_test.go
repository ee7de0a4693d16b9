package trace

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/internal/duckdbtest"
)

// sampleRequests covers every column with present, absent and empty values.
func sampleRequests() []*Request {
	full := &Request{
		RequestID: "r0", Run: "run-a", Stage: "0", Source: "vllm-bench", Model: "m", LoRA: "l",
		Worker: "w1", Session: "s1", Turn: Some[int64](4), Status: StatusOK, FinishReason: "length",
		ReasoningTokens: Some[int64](1), MaxOutputTokens: Some[int64](8), ClientQueueSec: Some(0.5),
		IdleInQueueSec: Some(0.0005), BudgetWaitSec: Some(0.0004), StoragePrefetchSec: Some(0.009),
		InputTokens: Some[int64](100), OutputTokens: Some[int64](3), CachedTokens: Some[int64](0),
		BlockSize: Some[int64](16), HashIDs: []int64{1, 2, 3},
		DeviceHitTokens: Some[int64](16), HostHitTokens: Some[int64](0), StorageHitTokens: Some[int64](5), RemoteHitTokens: Some[int64](7),
		IntendedArrival: Some(Time(1)), Arrival: Some(Time(1_500_000_001)),
		TTFTSec: Some(0.06338946700270753), E2ESec: Some(0.25), LastTokenSec: Some(0.24), ITLSec: []float64{0.1, 0.0752504760021111},
		ChunkTokens: []int32{1, 1, 1}, StreamEvents: Some[int64](4), TokenEvents: Some[int64](3), ThinkSec: Some(2.5),
		QueueSec: Some(0.0), ScheduleSec: Some(0.001), PrefillSec: Some(0.05), DecodeSec: Some(0.2),
		KVFetchSec: Some(0.003), StoragePrefetchIOSec: Some(0.004), Preemptions: Some[int64](2),
		Created: Some(Time(10)), RouterArrival: Some(Time(11)), WorkerArrival: Some(Time(12)),
		StartProcessing: Some(Time(13)), Ready: Some(Time(14)), GPUStart: Some(Time(15)),
		PrefillDone: Some(Time(16)), DecodeDone: Some(Time(17)), DoneAtRouter: Some(Time(18)),
		ITLUnit: ITLChunk, E2EBasis: E2ELastToken, TTFTBasis: TTFTFirstChunk, OutputTokensSource: OutputServerUsage, PrefillBasis: PrefillScheduled,
	}
	empty := &Request{RequestID: "r1", Run: "run-a", Status: StatusFailed, Error: "boom", ITLSec: []float64{}}
	zero := &Request{RequestID: "r2", Run: "run-b", Status: StatusOK, TTFTSec: Some(0.0), Arrival: Some(Time(0))}
	return []*Request{full, empty, zero}
}

func writeSample(t *testing.T, path string, reqs []*Request, runs []Run) {
	t.Helper()
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
	w.SetRuns(runs)
	w.SetMeta(MetaTraceStart, "1700000000000000000")
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func sampleRuns() []Run {
	return []Run{
		{Name: "run-a", Source: "vllm-bench", Model: "m", DurationSec: Some(5.25),
			Workload: &Workload{NumPrompts: 10, RequestRate: Rate(math.Inf(1))},
			Reported: json.RawMessage(`{"mean_ttft_ms":1.5}`)},
		{Name: "run-b", Source: "mooncake", BlockSize: 512},
	}
}

func TestParquetRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.parquet")
	in := sampleRequests()
	writeSample(t, path, in, sampleRuns())
	runs, out, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != len(in) {
		t.Fatalf("read %d requests, wrote %d", len(out), len(in))
	}
	for i := range in {
		if got, want := out[i].String(), in[i].String(); got != want {
			t.Errorf("request %d:\n got %s\nwant %s", i, got, want)
		}
	}
	if out[1].ITLSec == nil || len(out[1].ITLSec) != 0 {
		t.Errorf("empty ITL list read back as %#v, want empty non-nil", out[1].ITLSec)
	}
	if out[2].E2ESec.OK || !out[2].TTFTSec.OK {
		t.Errorf("absent/zero distinction lost: e2e %v ttft %v", out[2].E2ESec, out[2].TTFTSec)
	}
	gotRuns, _ := json.Marshal(runs)
	wantRuns, _ := json.Marshal(sampleRuns())
	if string(gotRuns) != string(wantRuns) {
		t.Errorf("runs:\n got %s\nwant %s", gotRuns, wantRuns)
	}
}

func TestParquetManyRowGroups(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.parquet")
	n := RowGroupRows*2 + 17
	reqs := make([]*Request, n)
	for i := range reqs {
		reqs[i] = &Request{Run: "r", Status: StatusOK, InputTokens: Some(int64(i)), ITLSec: []float64{float64(i) / 1e3}}
	}
	writeSample(t, path, reqs, nil)
	r, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.NumRows() != int64(n) {
		t.Fatalf("NumRows %d, want %d", r.NumRows(), n)
	}
	i := 0
	for r.Scan() {
		q := r.Request()
		if q.InputTokens.V != int64(i) || q.ITLSec[0] != float64(i)/1e3 {
			t.Fatalf("row %d read as %s", i, q)
		}
		if _, line := q.Pos(); line != i+1 {
			t.Fatalf("row %d has line %d", i, line)
		}
		i++
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	if i != n {
		t.Fatalf("scanned %d rows, want %d", i, n)
	}
}

func TestOpenRejectsForeignFiles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.parquet")
	os.WriteFile(path, []byte("not parquet"), 0o644)
	if _, err := OpenFile(path); err == nil || !strings.Contains(err.Error(), "not a Parquet file") {
		t.Errorf("got %v, want a not-a-Parquet-file error", err)
	}
}

func duckdb(t *testing.T, sql string) []map[string]any { return duckdbtest.Query(t, sql) }

func TestDuckDBReadsOurParquet(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.parquet")
	writeSample(t, path, sampleRequests(), sampleRuns())
	q := "'" + path + "'"

	rows := duckdb(t, "SELECT column_name, column_type FROM (DESCRIBE SELECT * FROM "+q+")")
	types := map[string]string{}
	for _, r := range rows {
		types[r["column_name"].(string)] = r["column_type"].(string)
	}
	want := map[string]string{
		"request_id": "VARCHAR", "status": "VARCHAR", "input_tokens": "BIGINT",
		"hash_ids": "BIGINT[]", "arrival_s": "DOUBLE", "ttft_s": "DOUBLE", "itl_s": "DOUBLE[]",
		"chunk_tokens": "INTEGER[]", "decode_done_s": "DOUBLE", "output_tokens_source": "VARCHAR",
	}
	if len(types) != len(columns) {
		t.Errorf("DuckDB sees %d columns, we write %d", len(types), len(columns))
	}
	for name, typ := range want {
		if types[name] != typ {
			t.Errorf("column %s: DuckDB type %q, want %q", name, types[name], typ)
		}
	}
	rows = duckdb(t, "SELECT count(*) AS n, count(ttft_s) AS ttft, count(e2e_s) AS e2e, "+
		"sum(len(itl_s)) AS gaps, max(arrival_s) AS last FROM "+q)
	got := rows[0]
	if got["n"] != "3" && got["n"] != float64(3) {
		t.Errorf("DuckDB count = %v, want 3", got["n"])
	}
	if s := jsonNumber(got["ttft"]); s != 2 {
		t.Errorf("non-null ttft_s = %v, want 2 (absent is null, zero is 0)", got["ttft"])
	}
	if s := jsonNumber(got["e2e"]); s != 1 {
		t.Errorf("non-null e2e_s = %v, want 1", got["e2e"])
	}
	if s := jsonNumber(got["last"]); s != 1.500000001 {
		t.Errorf("max(arrival_s) = %v, want 1.500000001 s", got["last"])
	}
	rows = duckdb(t, "SELECT decode(value) AS value FROM parquet_kv_metadata("+q+") WHERE decode(key) = 'opaltrace.runs'")
	if len(rows) != 1 || !strings.Contains(rows[0]["value"].(string), `"run-a"`) {
		t.Errorf("runs metadata as DuckDB sees it: %v", rows)
	}
}

func jsonNumber(v any) float64 { return duckdbtest.Number(v) }

func TestOpenFileColumns(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.parquet")
	in := sampleRequests()
	writeSample(t, path, in, sampleRuns())
	r, err := OpenFileColumns(path, "status", "ttft_s", "itl_s")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	i := 0
	for r.Scan() {
		q := r.Request()
		want := &Request{Status: in[i].Status, TTFTSec: in[i].TTFTSec, ITLSec: in[i].ITLSec}
		want.SetPos(path, i+1)
		if q.String() != want.String() {
			t.Errorf("row %d: got %s, want only %s", i, q, want)
		}
		i++
	}
	if r.Err() != nil || i != len(in) {
		t.Fatalf("read %d rows, err %v", i, r.Err())
	}
	if _, err := OpenFileColumns(path, "no_such_column"); err == nil {
		t.Error("unknown column accepted")
	}
}
