package ingest

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/opaltrace/opaltrace/internal/shareddata"
	"github.com/opaltrace/opaltrace/trace"
)

// seed adds the real files (their first whole lines within 4 KiB, when
// present) and the corpus inputs of dir to f.
//
// Note: the fuzzer minimizes every input that finds new coverage before it
// goes on, and a minimization runs the target thousands of times on
// mutations of the whole input: with 16-KiB seeds a 2-minute run spent
// nearly all of it minimizing (5 to 160 inputs tried). Run the campaign
// with -fuzzminimizetime 5s as well.
//
// Note: with Go 1.26 a run of a -fuzztime duration may end "FAIL ...
// context deadline exceeded" with no failing input written: a race in
// the fuzzing coordinator at the deadline (go.dev/issue/75804: its stop
// suppresses fuzzCtx.Err() alone, not the deadline's ctx.Err(); reported
// fixed for Go 1.27), not a finding; a budget of runs (-fuzztime 500000x)
// has no deadline to race. (Twice in eighteen 100 s runs on 2026-12-06, and
// once on 2026-12-05.)
func seed(f *testing.F, dir string, real ...string) {
	for _, rel := range real {
		p := filepath.Join(shareddata.Root(), rel)
		if b, err := os.ReadFile(p); err == nil {
			if len(b) > 4<<10 {
				b = b[:4<<10]
				if i := bytes.LastIndexByte(b, '\n'); i > 0 {
					b = b[:i+1]
				}
			}
			f.Add(b)
		}
	}
	paths, _ := filepath.Glob(filepath.Join("testdata", dir, "*"))
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if filepath.Ext(p) == ".txtar" {
			b = parseTxtar(b)["input"]
		}
		f.Add(b)
	}
}

// fuzzFormat reads data in format name: no panic, and every accepted
// request passes Validate, names its run and keeps the invariants that
// consumers size their work by (checkInvariants).
func fuzzFormat(t *testing.T, name string, data []byte) {
	r, err := NewReader(bytes.NewReader(data), "fuzz", Options{Format: name})
	if err != nil {
		t.Fatal(err)
	}
	n, bad := 0, 0
	var accepted []*trace.Request
	for r.Scan() {
		if n++; n > 1<<20 {
			t.Fatal("too many records")
		}
		switch rec := r.Record().(type) {
		case *trace.Request:
			if err := rec.Validate(); err != nil {
				t.Fatalf("accepted %s fails Validate: %v", rec, err)
			}
			if rec.Run == "" || rec.Source != name {
				t.Fatalf("accepted %s without run or source", rec)
			}
			if msg := checkInvariants(rec); msg != "" {
				t.Fatalf("accepted %s: %s", rec, msg)
			}
			accepted = append(accepted, rec.Clone())
		case *SyntaxError:
			if rec.File != "fuzz" || rec.Msg == "" {
				t.Fatalf("bad SyntaxError %#v", rec)
			}
			bad++
		case *Warning:
			if rec.File != "fuzz" || rec.Msg == "" {
				t.Fatalf("bad Warning %#v", rec)
			}
		default:
			t.Fatalf("record %T", rec)
		}
	}
	if err := r.Err(); err != nil {
		t.Fatalf("fatal error on in-memory input: %v", err)
	}
	if msg := checkCounts(name, data, len(accepted), bad); msg != "" {
		t.Fatal(msg)
	}
	if !fuzzing() {
		roundTrip(t, r.Runs(), accepted)
	}
}

// checkInvariants restates, independently of Validate, what an accepted
// request guarantees: every time within trace.MaxTraceTime of the start,
// every latency finite and under trace.MaxLatencySec, TTFT ≤ E2E and
// TTFT + ΣITL ≤ E2E within the tolerance (unless both are server-side),
// token counts in [0, trace.MaxTokens], chunk counts matching the gaps.
func checkInvariants(r *trace.Request) string {
	for _, t := range []trace.Opt[trace.Time]{r.Arrival, r.IntendedArrival, r.Created, r.RouterArrival, r.WorkerArrival,
		r.StartProcessing, r.Ready, r.GPUStart, r.PrefillDone, r.DecodeDone, r.DoneAtRouter} {
		if t.OK && (t.V > trace.MaxTraceTime || t.V < -trace.MaxTraceTime) {
			return fmt.Sprintf("time %v out of range", t.V)
		}
	}
	lat := func(v trace.Opt[float64]) bool { return !v.OK || (v.V >= 0 && v.V < trace.MaxLatencySec) }
	if !lat(r.TTFTSec) || !lat(r.E2ESec) || !lat(r.QueueSec) || !lat(r.PrefillSec) || !lat(r.DecodeSec) {
		return "a latency out of range"
	}
	sum := 0.0
	for _, g := range r.ITLSec {
		if !(g >= 0 && g < trace.MaxLatencySec) {
			return fmt.Sprintf("ITL gap %v out of range", g)
		}
		sum += g
	}
	server := r.TTFTBasis == trace.TTFTServer && r.E2EBasis == trace.E2EServer
	if r.TTFTSec.OK && r.E2ESec.OK && !server {
		tol := trace.ConsistencyTolSec + trace.ConsistencyTolRel*r.E2ESec.V
		if r.TTFTSec.V > r.E2ESec.V+tol || len(r.ITLSec) > 0 && r.TTFTSec.V+sum > r.E2ESec.V+tol {
			return "TTFT or TTFT + ΣITL over E2E"
		}
	}
	for _, c := range []trace.Opt[int64]{r.InputTokens, r.OutputTokens, r.CachedTokens, r.ReasoningTokens} {
		if c.OK && (c.V < 0 || c.V > trace.MaxTokens) {
			return fmt.Sprintf("token count %d out of range", c.V)
		}
	}
	if r.ChunkTokens != nil && len(r.ChunkTokens) != len(r.ITLSec) && len(r.ChunkTokens) != len(r.ITLSec)+1 {
		return "chunk_tokens do not match the ITL gaps"
	}
	return ""
}

// oneRecordALine are the formats whose every non-blank line is one record:
// a request or a bad record, nothing dropped unreported.
var oneRecordALine = map[string]bool{mooncakeName: true, aiperfName: true, vllmEngineName: true}

// headerLines are the formats that read at most one record a line (SGLang's
// metrics log skips the events that measure nothing), after as many header
// lines as given (a CSV's quoted field may span lines, and a broken quote
// ends the file in one bad record).
var headerLines = map[string]int{sglangMetricsName: 0, azureName: 1, burstGPTName: 1, lmbenchmarkName: 1}

// checkCounts checks that the records read add up to the input: requests
// + bad records = non-blank lines in the one-record-a-line formats; in the
// others read line by line, at most one record a line and requests only
// after the header.
func checkCounts(name string, data []byte, requests, bad int) string {
	lines := 0
	for l := range bytes.SplitSeq(data, []byte("\n")) {
		if len(bytes.TrimSpace(l)) > 0 {
			lines++
		}
	}
	if name == aiperfName && sniffAIPerfAggregate(data[:min(len(data), SniffLen)]) {
		// AIPerf's aggregate export, read whole: a summary-only run or
		// one bad record.
		if requests != 0 || bad > 1 {
			return fmt.Sprintf("%d requests + %d bad records from an aggregate export", requests, bad)
		}
		return ""
	}
	if oneRecordALine[name] && requests+bad != lines {
		return fmt.Sprintf("%d requests + %d bad records from %d non-blank lines", requests, bad, lines)
	}
	// A broken or missing header is itself a bad record (a lone `"`, a
	// blank input), so the header bounds the requests, not the bad records.
	if h, ok := headerLines[name]; ok && (requests > max(lines-h, 0) || requests+bad > max(lines, 1)) {
		return fmt.Sprintf("%d requests + %d bad records from %d non-blank lines, %d of them header", requests, bad, lines, h)
	}
	return ""
}

// fuzzing reports whether this process runs under go test -fuzz.
//
// Note: a Parquet round trip takes so long in the instrumented fuzz binary
// (arrow and zstd are instrumented too) that a 2-minute run reached about
// ten inputs. Under -fuzz the round trip is therefore left out; the plain
// test run round-trips every seed and every committed corpus entry, and
// the inputs a fuzz run found interesting can be replayed with the round
// trip by copying them into testdata/fuzz/FuzzX and running go test.
func fuzzing() bool {
	f := flag.Lookup("test.fuzz")
	return f != nil && f.Value.String() != ""
}

// roundTrip writes reqs to Parquet, reads them back and checks that every
// String() is unchanged (style.md §7).
func roundTrip(t *testing.T, runs []trace.Run, reqs []*trace.Request) {
	t.Helper()
	if len(reqs) == 0 {
		return
	}
	path := filepath.Join(t.TempDir(), "rt.parquet")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := trace.NewWriter(f)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range reqs {
		if err := w.Write(q); err != nil {
			t.Fatalf("write %s: %v", q, err)
		}
	}
	w.SetRuns(runs)
	if err := w.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	f.Close()
	_, got, err := trace.ReadFile(path)
	if err != nil {
		t.Fatalf("read back: %v", err)
	}
	if len(got) != len(reqs) {
		t.Fatalf("read back %d requests, wrote %d", len(got), len(reqs))
	}
	for i := range reqs {
		if a, b := reqs[i].String(), got[i].String(); a != b {
			t.Fatalf("Parquet round trip changed a request:\nwrote %s\nread  %s", a, b)
		}
	}
}

func FuzzVLLMBench(f *testing.F) {
	seed(f, "vllmbench", lambdaFile, er0080File)
	f.Fuzz(func(t *testing.T, data []byte) { fuzzFormat(t, vllmBenchName, data) })
}

func FuzzMooncake(f *testing.F) {
	seed(f, "mooncake", convFile)
	f.Fuzz(func(t *testing.T, data []byte) { fuzzFormat(t, mooncakeName, data) })
}

func FuzzSGLangBench(f *testing.F) {
	seed(f, "sglangbench", sglangOnline, sglangPD)
	f.Fuzz(func(t *testing.T, data []byte) { fuzzFormat(t, sglangBenchName, data) })
}

func FuzzSGLangMetrics(f *testing.F) {
	seed(f, "sglangmetrics")
	f.Fuzz(func(t *testing.T, data []byte) { fuzzFormat(t, sglangMetricsName, data) })
}

func FuzzSGLangTrace(f *testing.F) {
	seed(f, "sglangtrace")
	f.Fuzz(func(t *testing.T, data []byte) { fuzzFormat(t, sglangTraceName, data) })
}

func FuzzOTLP(f *testing.F) {
	seed(f, "otlp", otelFile)
	f.Fuzz(func(t *testing.T, data []byte) { fuzzFormat(t, otlpName, data) })
}
