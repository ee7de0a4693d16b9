package replay

import (
	"bufio"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opaltrace/opaltrace/internal/golden"

	"github.com/opaltrace/opaltrace/internal/shareddata"
	"github.com/opaltrace/opaltrace/replay/kvcache"
	"github.com/opaltrace/opaltrace/trace"
)

// A burst of requests makes the fleet grow after the start-up time, the
// idle tail makes it drain back to its minimum, no request reaches a
// worker before it is ready, and the GPU-hours are the fleet's time.
func TestAutoscaleBurst(t *testing.T) {
	var reqs []*trace.Request
	for i := range 400 { // 40 requests/s for 10 s
		reqs = append(reqs, req(fmt.Sprintf("b%d", i), time.Duration(i)*25*ms, 300, 40))
	}
	for i := range 5 { // then one every 20 s
		reqs = append(reqs, req(fmt.Sprintf("t%d", i), 30*time.Second+time.Duration(i)*20*time.Second, 300, 40))
	}
	cfg := Config{Workers: 1, Router: RouterLeastRequests, Autoscale: AutoscaleConfig{
		Metric: MetricQueueDepth, Target: 2, MaxReplicas: 4, SyncPeriodSec: 1,
		ScaleDownStabilizationSec: ptr(10), ContainerStartSec: 1, WeightsGB: 16, StorageGBps: 16,
	}}
	cost := linearCost{Base: 10 * ms, PerToken: 200 * time.Microsecond}
	_, all, st := replay(t, cfg, cost, 400, reqs)
	_, again, st2 := replay(t, cfg, cost, 400, reqs)
	if dump(all) != dump(again) || st.GPUHours != st2.GPUHours {
		t.Error("two autoscaled replays differ")
	}
	if st.Completed != len(reqs) {
		t.Fatalf("%d of %d completed", st.Completed, len(reqs))
	}
	most, last := 0.0, st.Fleet[len(st.Fleet)-2] // the last whole second
	for _, f := range st.Fleet {
		most = max(most, f.Ready)
	}
	if most < 2 || last.Ready != 1 || last.Starting != 0 || last.Draining != 0 {
		t.Errorf("fleet: at most %v ready, at the end %+v; want growth and a return to 1", most, last)
	}
	// The first sync is at 1 s and a worker takes 1 + 16/16 s to start.
	for _, r := range all {
		if r.Worker != "w0" && r.RouterArrival.V < trace.Time(3*time.Second) {
			t.Errorf("%s reached %s at %v, before any new worker was ready", r.RequestID, r.Worker, r.RouterArrival.V)
		}
	}
	checkGPUHours(t, st)
}

// checkGPUHours checks that a replay's GPU-hours (one GPU a worker) are
// its fleet's workers, ready, starting or draining, summed over its
// seconds.
func checkGPUHours(t *testing.T, st Stats) {
	t.Helper()
	var sum float64
	for _, f := range st.Fleet {
		sum += f.Ready + f.Starting + f.Draining
	}
	if hours := sum / 3600; math.Abs(hours-st.GPUHours) > 1e-9 {
		t.Errorf("GPU-hours %v, the fleet's seconds sum to %v hours", st.GPUHours, hours)
	}
}

func TestAutoscaleConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		a    AutoscaleConfig
		want string
	}{
		{AutoscaleConfig{Metric: "cpu", Target: 1}, "autoscale.metric: unknown metric"},
		{AutoscaleConfig{Metric: MetricKVUsage}, "autoscale.target: 0 is not a positive number"},
		{AutoscaleConfig{Metric: MetricSLOAttainment, Target: 0.9}, "autoscale.slo_ttft_s"},
		{AutoscaleConfig{Metric: MetricITLAttainment, Target: 0.9}, "autoscale.slo_itl_s: itl_slo_attainment needs an ITL objective"},
		{AutoscaleConfig{Metric: MetricITLAttainment, Target: 1.5, SLOITLSec: 0.05}, "autoscale.target: 1.5 is not an attainment in (0, 1]"},
		{AutoscaleConfig{Metric: MetricQueueDepth, Target: 1, MinReplicas: ptrInt(5), MaxReplicas: 2}, "autoscale.max_replicas"},
		{AutoscaleConfig{Metric: MetricQueueDepth, Target: 1, WeightsGB: 10}, "autoscale.storage_gbps"},
		{AutoscaleConfig{Metric: MetricQueueDepth, Target: 1, ReplicaWorkers: 2}, "autoscale: the workers (1) are not whole replicas of 2 workers each"},
	} {
		err := Config{Autoscale: tc.a}.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want %q", tc.a, err, tc.want)
		}
	}
}

var autoscaleDemo = flag.Bool("autoscaledemo", false, "replay the Azure conversation trace with autoscaling and write testdata/autoscale_azure.md")

// readAzure reads an Azure LLM inference trace CSV
// (TIMESTAMP,ContextTokens,GeneratedTokens) as requests arriving at their
// times since the first.
func readAzure(tb testing.TB, path string) []*trace.Request {
	tb.Helper()
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var reqs []*trace.Request
	var t0 time.Time
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		if line == 1 {
			continue
		}
		p := strings.Split(sc.Text(), ",")
		at, err := time.Parse("2006-01-02 15:04:05.0000000", p[0])
		in, err1 := strconv.ParseInt(p[1], 10, 64)
		gen, err2 := strconv.ParseInt(p[2], 10, 64)
		if len(p) != 3 || err != nil || err1 != nil || err2 != nil {
			tb.Fatalf("%s:%d: bad row %q", path, line, sc.Text())
		}
		if t0.IsZero() {
			t0 = at
		}
		r := req("azure/"+strconv.Itoa(line-2), at.Sub(t0), in, gen)
		r.SetPos(path, line)
		reqs = append(reqs, r)
	}
	if err := sc.Err(); err != nil {
		tb.Fatal(err)
	}
	return reqs
}

// TestAutoscaleAzure replays the Azure conversation trace at its own
// times on Llama-3.1-8B workers on A10, scaled by
// each metric in turn, and writes the arrivals and the ready workers per
// minute to testdata/autoscale_azure.md (run with -autoscaledemo).
func TestAutoscaleAzure(t *testing.T) {
	reqs := readAzure(t, shareddata.Path(t, "traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv"))
	cost, blocks := llama8BOn(t, "a10")
	policies := []struct {
		metric string
		target float64
	}{{MetricRequestRate, 1}, {MetricKVUsage, 0.5}, {MetricQueueDepth, 2}, {MetricSLOAttainment, 0.95}}
	const bucket = 120
	var arrivals []int
	var ready [][]float64
	var b strings.Builder
	b.WriteString("# Autoscaling on the Azure conversation trace\n\n")
	b.WriteString("19,366 requests at their own times, Llama-3.1-8B on A10 workers (24 GB: a small KV cache), least_requests router,\n")
	b.WriteString("2 workers at the start; HPA with 1–16 replicas, sync 15 s, tolerance 0.1, scale-up window 0 s, scale-down\n")
	b.WriteString("window 60 s; a new worker is ready after 30 s + 16 GB of weights at 2 GB/s = 38 s. slo_attainment: TTFT ≤ 1 s.\n")
	b.WriteString("Regenerate: go test ./replay -run TestAutoscaleAzure -autoscaledemo\n\n")
	b.WriteString("| metric | target | GPU-hours | TTFT p50 (s) | TTFT p99 (s) | r(arrivals, ready workers) per 2 min |\n|---|---|---|---|---|---|\n")
	for _, p := range policies {
		cfg := Config{Workers: 2, Router: RouterLeastRequests,

			Autoscale: AutoscaleConfig{
				Metric: p.metric, Target: p.target, MinReplicas: ptrInt(1), MaxReplicas: 16, SLOTTFTSec: 1,
				ScaleDownStabilizationSec: ptr(60), ContainerStartSec: 30, WeightsGB: 16, StorageGBps: 2,
			}}
		var ttft []float64
		st, err := Run(cfg, cost, blocks, reqs, func(r *trace.Request) error {
			if r.Status == trace.StatusOK {
				ttft = append(ttft, r.TTFTSec.V)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if st.Completed != len(reqs) {
			t.Errorf("%s: %d of %d completed", p.metric, st.Completed, len(reqs))
		}
		n := len(st.Fleet)/bucket + 1
		if arrivals == nil {
			arrivals = make([]int, n)
			for _, r := range reqs {
				arrivals[int(float64(r.Arrival.V)/1e9)/bucket]++
			}
		}
		rd := make([]float64, len(arrivals))
		for _, f := range st.Fleet {
			if int(f.Second/bucket) < len(rd) {
				rd[f.Second/bucket] += f.Ready / bucket
			}
		}
		ready = append(ready, rd)
		slices.Sort(ttft)
		fmt.Fprintf(&b, "| %s | %g | %.3f | %.3f | %.3f | %.3f |\n", p.metric, p.target, st.GPUHours, quantile(ttft, 0.5), quantile(ttft, 0.99), correlation(arrivals[:len(arrivals)-1], rd[:len(rd)-1]))
	}
	b.WriteString("\nReady workers, mean over each 2 minutes (the last is partial):\n\n| minute | arrivals |")
	for _, p := range policies {
		fmt.Fprintf(&b, " %s |", p.metric)
	}
	b.WriteString("\n|---|---|" + strings.Repeat("---|", len(policies)) + "\n")
	for i := range arrivals {
		fmt.Fprintf(&b, "| %d | %d %s |", i*bucket/60, arrivals[i], strings.Repeat("▮", (arrivals[i]+50)/100))
		for k := range policies {
			fmt.Fprintf(&b, " %.2f %s |", ready[k][i], strings.Repeat("█", int(ready[k][i]+0.5)))
		}
		b.WriteString("\n")
	}
	t.Log("\n" + b.String())
	// The table is a golden file: every run checks it, the flag (or
	// -update) rewrites it.
	golden.CheckOrWrite(t, filepath.Join("testdata", "autoscale_azure.md"), []byte(b.String()), *autoscaleDemo)
}

// correlation is Pearson's r of a and b.
func correlation(a []int, b []float64) float64 {
	var ma, mb float64
	for i := range a {
		ma += float64(a[i])
		mb += b[i]
	}
	ma /= float64(len(a))
	mb /= float64(len(b))
	var sab, saa, sbb float64
	for i := range a {
		da, db := float64(a[i])-ma, b[i]-mb
		sab += da * db
		saa += da * da
		sbb += db * db
	}
	return sab / math.Sqrt(saa*sbb)
}

// Stats.Evictions counts the evictions of every worker a slot held: a
// slot restarted after a scale-down starts a new cache (the old one,
// Reset, on vLLM), and the old one's evictions still happened. The
// observer sees each step's cache after scheduling, when its count is
// current; a count that falls is a cache started afresh.
func TestAutoscaleCountsRetiredEvictions(t *testing.T) {
	t.Parallel()
	reqs := append(randomTrace(17, 300, 60), conversationTrace(5, 80)...)
	cost := linearCost{Base: 2 * ms, PerToken: 20 * time.Microsecond}
	cfg := Config{Workers: 4, Router: RouterLeastRequests, Scheduler: SchedulerConfig{MaxNumBatchedTokens: 256, BlockSize: 16},
		Autoscale: AutoscaleConfig{
			Metric: MetricQueueDepth, Target: 2, MinReplicas: ptrInt(1), MaxReplicas: 4, SyncPeriodSec: 1,
			ScaleDownStabilizationSec: ptr(5.0), ContainerStartSec: 1, WeightsGB: 16, StorageGBps: 16,
		}}
	seen := map[*kvcache.Cache]int64{} // each cache's evictions, as of its last step
	var sum int64                      // of the caches' earlier lives
	lives := 0
	st, err := RunObserved(cfg, cost, 70, reqs, func(*trace.Request) error { return nil }, func(s *Step) error {
		n, ok := seen[s.KV]
		if !ok || s.KV.Evictions < n {
			lives++
			sum += n
		}
		seen[s.KV] = s.KV.Evictions
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range seen {
		sum += n
	}
	if lives <= cfg.Workers {
		t.Fatalf("%d caches for %d slots: no slot restarted", lives, cfg.Workers)
	}
	if st.Evictions != sum {
		t.Errorf("Stats.Evictions %d, the workers' caches evicted %d", st.Evictions, sum)
	}
}

// A restarted slot's worker (engine.restart) keeps its cache, Reset, and
// its scratch's memory, empty, with no request of the stopped worker left
// in the running list's or the batch's memory (which would keep their
// states from the collector until overwritten).
func TestRestartKeepsScratch(t *testing.T) {
	yes := true
	cfg := Config{Scheduler: SchedulerConfig{Engine: "vllm", BlockSize: 16, MaxNumBatchedTokens: 256, MaxNumSeqs: 8, EnablePrefixCaching: &yes, StreamInterval: 1}}
	e := &engine{cfg: cfg, kvBlocks: 64}
	old := newWorker(0, "w0", cfg.Scheduler, e.kvBlocks, &e.test)
	e.workers = []*worker{old}
	r := &reqState{}
	old.running = append(old.running, r, r)
	old.sched = append(old.sched, scheduled{r, 1})
	old.durs, old.secs = append(old.durs, time.Millisecond), append(old.secs, 0.001)
	old.batch.Decode = append(old.batch.Decode, 7)
	v := old.s.(*vllm)
	v.peek, v.due = append(v.peek, 3), append(v.due, 4)
	v.last.hits = append(v.last.hits, 5)
	kv := v.kv

	w := e.restart(0)
	nv := w.s.(*vllm)
	if nv.kv != kv || nv == v {
		t.Fatalf("restart: cache %p (the stopped worker's %p), scheduler new: %v", nv.kv, kv, nv != v)
	}
	for name, n := range map[string][2]int{
		"running": {len(w.running), cap(w.running)}, "sched": {len(w.sched), cap(w.sched)},
		"durs": {len(w.durs), cap(w.durs)}, "secs": {len(w.secs), cap(w.secs)},
		"decode": {len(w.batch.Decode), cap(w.batch.Decode)}, "peek": {len(nv.peek), cap(nv.peek)},
		"due": {len(nv.due), cap(nv.due)}, "last hits": {len(nv.last.hits), cap(nv.last.hits)},
	} {
		if n[0] != 0 || n[1] == 0 {
			t.Errorf("restarted worker's %s: length %d, capacity %d; want empty, with the stopped worker's memory", name, n[0], n[1])
		}
	}
	for i, x := range w.running[:cap(w.running)] {
		if x != nil {
			t.Errorf("running list's memory holds a request at %d", i)
		}
	}
	for i, s := range w.sched[:cap(w.sched)] {
		if s.r != nil {
			t.Errorf("batch's memory holds a request at %d", i)
		}
	}
	if nv.last.idx != 0 || nv.resumed != 0 || nv.stuck {
		t.Errorf("restarted scheduler keeps the stopped one's state: last match %d, resumed %d, stuck %v", nv.last.idx, nv.resumed, nv.stuck)
	}
}
