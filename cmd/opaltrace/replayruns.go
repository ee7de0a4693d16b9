package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/opaltrace/opaltrace/analyze"
	"github.com/opaltrace/opaltrace/calibrate"
	"github.com/opaltrace/opaltrace/deploy"
	"github.com/opaltrace/opaltrace/ingest"
	"github.com/opaltrace/opaltrace/internal/atomicfile"
	"github.com/opaltrace/opaltrace/internal/human"
	"github.com/opaltrace/opaltrace/internal/numpyrand"
	"github.com/opaltrace/opaltrace/internal/progress"
	"github.com/opaltrace/opaltrace/metricsout"
	"github.com/opaltrace/opaltrace/replay"
	"github.com/opaltrace/opaltrace/report"
	"github.com/opaltrace/opaltrace/trace"
)

// A replayJob is one simulated run: the requests of one input run, or the
// workload regenerated from a summary-only run's recorded arguments.
type replayJob struct {
	name string // simulated run name
	of   string // the input run it replays
	// ofLabel names the input run by what sets it apart from the other
	// runs of its input ("#3 rate=4"), "" where nothing does.
	ofLabel string
	// workload is the input run's recorded workload (dataset, lengths,
	// rate, prompts), which its replay ran too; nil where none.
	workload *trace.Workload
	// startUnixN is the input run's wall-clock start (0: unknown), the
	// default start of --metrics-out's samples.
	startUnixN int64
	in         replay.Inputs // requests to send
	// setup is the run's deployment and configuration; its Config has
	// the workload mode the run needs.
	setup *deploy.Setup
	how   string // "trace" or "regenerated"
	// client is the client overhead of a fitted cost model, applied to
	// each simulated record (its per-request part is in setup.Config).
	client calibrate.ClientOverhead
	// after, when set, is the run this one followed on the same server:
	// it is replayed first, unrecorded, so that this run starts with the
	// prefix cache it left (calibrate.CarryAfter); afterOf names it.
	after   replay.Inputs
	afterOf string
}

// replayInputs holds a trace's requests for replay, by run, column-wise
// (replay.Columns: about a tenth of the memory of the requests): add
// takes them as a reader yields them, so a large trace is never held
// whole.
type replayInputs struct {
	runs  []trace.Run // the dataset's
	named []string    // runs in order of their first request
	// labels are the input runs' labels among all of them, before --run
	// chose (trace.RunFieldLabels: "#3 rate=4"); nil where no field sets
	// them apart.
	labels  map[string]string
	byRun   map[string]*replay.Columns
	seen    map[string]int // requests per run, dropped ones included
	dropped map[string]int // failed requests whose lengths the source did not record
	// measured counts the requests per run with a measured TTFT or E2E:
	// such a run is replayed to be compared with what was measured.
	measured map[string]int
	// chunkTokens and chunks sum, per run, the output tokens after the
	// first and the chunks that carried them (one per ITL gap) of the requests
	// whose ITL is per chunk: the source's chunking, which the replay's
	// stream interval follows so that its ITL is measured alike.
	chunkTokens, chunks map[string]int64
}

func newReplayInputs() *replayInputs {
	return &replayInputs{byRun: map[string]*replay.Columns{}, seen: map[string]int{}, dropped: map[string]int{}, measured: map[string]int{},
		chunkTokens: map[string]int64{}, chunks: map[string]int64{}}
}

// allRuns returns the dataset's runs, then those only requests name, in
// order of appearance.
func (x *replayInputs) allRuns() []trace.Run {
	all := append([]trace.Run(nil), x.runs...)
	known := map[string]bool{}
	for _, r := range x.runs {
		known[r.Name] = true
	}
	for _, name := range x.named {
		if !known[name] {
			all = append(all, trace.Run{Name: name})
		}
	}
	return all
}

// add takes r (which the caller may reuse). A failed request that lacks a
// prompt or output length is only counted: the source recorded its
// failure, not its shape (AIPerf's error records), so it cannot be sent
// again. Successful requests are kept whatever they lack, and the engine
// names what is missing.
func (x *replayInputs) add(r *trace.Request) error {
	if x.seen[r.Run] == 0 {
		x.named = append(x.named, r.Run)
	}
	x.seen[r.Run]++
	if r.TTFTSec.OK || r.E2ESec.OK {
		x.measured[r.Run]++
	}
	if r.OK() && r.ITLUnit == trace.ITLChunk && len(r.ITLSec) > 0 && r.OutputTokens.OK {
		x.chunkTokens[r.Run] += r.OutputTokens.V - 1
		x.chunks[r.Run] += int64(len(r.ITLSec))
	}
	if !r.OK() && (!r.InputTokens.OK || !r.OutputTokens.OK) {
		x.dropped[r.Run]++
		return nil
	}
	c := x.byRun[r.Run]
	if c == nil {
		c = &replay.Columns{}
		x.byRun[r.Run] = c
	}
	c.Add(r)
	return nil
}

// loadReplayInputs reads the trace at arg (opaltrace Parquet, or any
// format ingest reads) into replayInputs, which copies each request
// (add), so the reader may reuse one (Options.Reuse).
func loadReplayInputs(arg string, opts ingest.Options, allowErrors bool, stderr io.Writer) (*replayInputs, error) {
	_, path := splitLabel(arg)
	opts.Reuse = true
	x := newReplayInputs()
	var err error
	x.runs, err = eachRequest(path, nil, opts, allowErrors, stderr, x.add)
	return x, err
}

// selectRuns keeps the runs sels pick (all without selectors), and their
// requests. A selector that picks nothing is an error that lists the runs
// and says that --run no longer names the simulated run.
func (x *replayInputs) selectRuns(sels []trace.RunSelector) error {
	all := x.allRuns()
	x.labels = labelsByName(all)
	if len(sels) == 0 {
		return nil
	}
	idx, err := trace.SelectRuns(all, sels)
	if err != nil {
		return fmt.Errorf("replay: %w (--run selects input runs, as stats does; --run-name names the simulated run)", err)
	}
	keep := map[string]bool{}
	var runs []trace.Run
	for _, i := range idx {
		keep[all[i].Name] = true
		runs = append(runs, all[i])
	}
	var named []string
	for _, n := range x.named {
		if keep[n] {
			named = append(named, n)
		}
	}
	for n := range x.byRun {
		if !keep[n] {
			delete(x.byRun, n)
		}
	}
	x.runs, x.named = runs, named
	return nil
}

// replayJobs makes one job per input run, in order. A run without
// requests is regenerated from its recorded workload (vLLM's and SGLang's
// random datasets); one that cannot be is listed on stderr and passed over.
// With one job the simulated run is called runName; with several,
// runName/INPUT-RUN, so each is reported on its own.
func replayJobs(cl deploy.Cluster, over deploy.Overrides, x *replayInputs, runName, carry string, stderr io.Writer) ([]replayJob, error) {
	if carry != "auto" && carry != "on" && carry != "off" {
		return nil, fmt.Errorf("--carry-cache %q: want auto, on or off", carry)
	}
	var jobs []replayJob
	var jobRuns []trace.Run
	var passed []string
	var notes runNotes
	for _, run := range x.allRuns() {
		// A run is measured when its requests or its own summary
		// (summary-only benchmark runs) carry latencies.
		over.Measured = x.measured[run.Name] > 0 || len(run.Reported) > 0
		setup, err := deploy.Resolve(cl, run, over)
		if err != nil {
			return nil, err
		}
		client := clientOverhead(over, setup)
		notes.add(run.Name, setup.Notes)
		if x.seen[run.Name] > 0 {
			if d := x.dropped[run.Name]; d > 0 {
				fmt.Fprintf(stderr, "run %s: passing over %d failed requests whose lengths the source did not record\n", run.Name, d)
			}
			in := x.byRun[run.Name]
			if in == nil {
				passed = append(passed, fmt.Sprintf("run %s: no request with its lengths", run.Name))
				continue
			}
			streamLikeTheSource(setup, run.Name, x.chunkTokens[run.Name], x.chunks[run.Name], stderr)
			var how string
			var send replay.Inputs
			setup.Config, send, how = sendLikeTheBenchmark(setup.Config, run, in, in.Arrivals())
			jobs = append(jobs, replayJob{of: run.Name, ofLabel: x.labels[run.Name], workload: run.Workload, startUnixN: run.StartUnixN, in: send, setup: setup, how: how, client: client})
			jobRuns = append(jobRuns, run)
			continue
		}
		gen, mode, err := replay.Regenerate(run, cl.Seed)
		if err != nil {
			passed = append(passed, err.Error())
			continue
		}
		w := &setup.Config.Workload
		w.Mode, w.Clients, w.TimeScale = mode.Mode, mode.Clients, mode.TimeScale
		jobs = append(jobs, replayJob{of: run.Name, ofLabel: x.labels[run.Name], workload: run.Workload, startUnixN: run.StartUnixN, in: gen, setup: setup, how: "regenerated", client: client})
		jobRuns = append(jobRuns, run)
	}
	notes.print(stderr)
	carryOver(jobs, jobRuns, carry, stderr)
	if len(passed) > 0 {
		fmt.Fprintf(stderr, "not replayed (%d runs): %s\n", len(passed), strings.Join(passed, "; "))
	}
	if len(jobs) == 0 {
		return nil, errors.New("replay: nothing to replay: the input has no requests and no run whose workload can be regenerated")
	}
	for i := range jobs {
		jobs[i].name = runName
		if len(jobs) > 1 {
			jobs[i].name = runName + "/" + jobs[i].of
		}
	}
	return jobs, nil
}

// streamLikeTheSource sets the replay's stream interval to the source's
// recorded chunking, tokens/chunks tokens per chunk after the first
// (engines send the first token alone, then every interval) rounded, when the
// source streamed several tokens a chunk (its ITL is per chunk) and
// neither the cluster file, a flag nor the run's engine options set the
// interval: a simulated ITL per token compared with an observed one per
// chunk would compare different things.
func streamLikeTheSource(setup *deploy.Setup, run string, tokens, chunks int64, stderr io.Writer) {
	if chunks == 0 {
		return
	}
	if _, given := setup.Cluster.Given("scheduler.stream_interval"); given || setup.Config.Scheduler.StreamInterval > 1 {
		return
	}
	per := float64(tokens) / float64(chunks)
	k := int64(math.Round(per))
	if k <= 1 {
		return
	}
	setup.Config.Scheduler.StreamInterval = k
	fmt.Fprintf(stderr, "run %s: the source streamed %.2f tokens per chunk after the first (ITL per chunk): replayed with stream_interval %d\n", run, per, k)
}

// clientOverhead returns the client overheads of a fitted cost model
// (calibrate by replay) and adds the per-request one to setup's client,
// as the fit replayed it.
func clientOverhead(over deploy.Overrides, setup *deploy.Setup) calibrate.ClientOverhead {
	cm, ok := over.CostModel.(*calibrate.CostModel)
	if !ok {
		return calibrate.ClientOverhead{}
	}
	o := cm.ClientOverhead()
	o.ApplyConfig(&setup.Config)
	return o
}

// traceJob is the job of replaying reqs as they are on cl.
func traceJob(cl deploy.Cluster, reqs []*trace.Request, name string) ([]replayJob, error) {
	setup, err := deploy.Resolve(cl, trace.Run{}, deploy.Overrides{})
	if err != nil {
		return nil, err
	}
	return []replayJob{{name: name, in: replay.Requests(reqs), setup: setup, how: "trace"}}, nil
}

// replayToParquet replays each job through the cluster and writes every
// simulated request atomically to out, one run per job, returning their
// in-memory summaries (the demo and --opal-workload, whose runs are small).
func replayToParquet(jobs []replayJob, out, perSecond string, stderr io.Writer) ([]*analyze.Summary, error) {
	done, err := replayRuns(jobs, out, sideOutputs{perSecond: perSecond}, stderr, summaryPlan{streamAbove: neverStream})
	if err != nil {
		return nil, err
	}
	sums := make([]*analyze.Summary, len(done))
	for i, d := range done {
		sums[i] = d.mem
	}
	return sums, nil
}

// lowMemoryRequests is the number of simulated requests above which a run
// is summarised by passes over the written file instead of in memory: a
// simulated request keeps one ITL gap per output token, and the in-memory
// summary pools and sorts them, so with the Azure conversation lengths
// (211 output tokens on average) it costs about 9 KB per request
// (measured with replay --sample, 64 workers: 50,000 requests 705 MiB
// peak RSS in memory, 274 MiB streamed; 100,000 streamed 290 MiB). Below
// it the in-memory summary is affordable and says more (duration,
// throughput, goodput, semantics).
const lowMemoryRequests = 50_000

// neverStream, as a summaryPlan's streamAbove, keeps every summary in
// memory.
const neverStream = math.MaxInt

// A summaryPlan says how replayRuns summarizes each run.
type summaryPlan struct {
	// streamAbove is the run size above which the summary is made by
	// passes over the written file (lowMemoryRequests, or 0 with
	// --low-memory).
	streamAbove int
	// printed says the summaries are only printed (report.WriteStats
	// with its default percentiles): an in-memory one then selects the
	// pooled ITL's median and percentiles by passes over the gaps
	// (analyze.Options.SelectITL) rather than sorting millions of them.
	printed bool
}

// A replayed run is one job's simulated run and its summary: mem when the
// records were kept, else stream, computed from the file after it was
// committed.
type replayed struct {
	run    trace.Run
	label  string // the summary's label: the input run it replays, by what sets it apart
	mem    *analyze.Summary
	stream *analyze.Summary          // the same summary, by passes over the file
	sum    *analyze.StreamSummarizer // stream's first pass, made as the records were written

	// memDone delivers mem, made concurrently, until replayRuns has it.
	memDone <-chan *analyze.Summary
}

// summarizeBatch is the number of records the engine hands the in-memory
// summary at a time: one channel send per batch rather than per record.
const summarizeBatch = 64

// A memSummary summarizes a run in memory on a goroutine of its own, fed
// by the engine's emit as the records come (analyze.Summarizer), so that
// the summary's heavy part, counting millions of ITL gaps, runs on the
// second core while the engine runs on the first, and only its last steps
// are left when the replay ends.
type memSummary struct {
	batch []*trace.Request
	feed  chan []*trace.Request
	done  chan *analyze.Summary
}

func newMemSummary(run trace.Run, opts analyze.Options) *memSummary {
	m := &memSummary{feed: make(chan []*trace.Request, 16), done: make(chan *analyze.Summary, 1)}
	z := analyze.NewSummarizer(run, opts)
	go func() {
		for b := range m.feed {
			for _, r := range b {
				z.Add(r)
			}
		}
		m.done <- z.Summary()
	}()
	return m
}

// add hands r, which the summary keeps, to the goroutine.
func (m *memSummary) add(r *trace.Request) {
	m.batch = append(m.batch, r)
	if len(m.batch) == summarizeBatch {
		m.feed <- m.batch
		m.batch = make([]*trace.Request, 0, summarizeBatch)
	}
}

// finish hands over the last records; the summary comes on the returned
// channel.
func (m *memSummary) finish() <-chan *analyze.Summary {
	if len(m.batch) > 0 {
		m.feed <- m.batch
	}
	close(m.feed)
	return m.done
}

// replayRuns replays each job through its setup and writes every
// simulated request atomically to out, one run per job, and the
// per-second statistics to perSecond when it is not "". The records are
// handed to a concurrent Parquet writer and, for runs of at most
// plan.streamAbove requests, kept for the in-memory summary; larger runs keep
// none (the engine reuses them, Options.Transient): their summaries are
// counted as records are written and finished by passes over the
// committed file (analyze.StreamSummarizer), so memory does not grow with
// the run.
func replayRuns(jobs []replayJob, out string, side sideOutputs, stderr io.Writer, plan summaryPlan) ([]replayed, error) {
	perSecond := side.perSecond
	if perSecond != "" && len(jobs) > 1 {
		return nil, fmt.Errorf("--per-second: the input has %d runs to replay; per-second statistics are written for one run at a time", len(jobs))
	}
	if side.metrics != "" && len(jobs) > 1 {
		return nil, fmt.Errorf("--metrics-out: the input has %d runs to replay; metrics are written for one run at a time (--run)", len(jobs))
	}
	if side.plannerLog != "" {
		if len(jobs) > 1 {
			return nil, fmt.Errorf("--planner-log: the input has %d runs to replay; the planner's adjustments are written for one run at a time (--run)", len(jobs))
		}
		if c := jobs[0].setup.Config; len(jobs) == 1 && c.Disaggregation.Planner.Policy == "" && c.Planner.Policy == "" {
			return nil, errors.New("--planner-log: the cluster has no planner (disaggregation.planner, or planner for an aggregated fleet)")
		}
	}
	f, err := atomicfile.Create(out)
	if err != nil {
		return nil, err
	}
	defer f.Abort()
	// Concurrent: the file is encoded and compressed on a second core
	// while the engine runs; Write copies each record, so the engine may
	// reuse it once emit returns. When every run's records are kept for
	// its summary, which reads their ITL gaps again at the end, the
	// writer keeps their lists too rather than copy them (SharedLists),
	// and nothing is collected after the last run (pauseGC).
	shared := true
	for _, job := range jobs {
		shared = shared && job.in.Len() <= plan.streamAbove
	}
	w, err := trace.NewWriterWith(f, trace.WriterOptions{Concurrent: true, SharedLists: shared})
	if err != nil {
		return nil, err
	}
	var runs []trace.Run
	var done []replayed
	meter := progress.New(stderr)
	for _, job := range jobs {
		// The run records the configuration that ran: every default,
		// every override and the engine's own settings.
		ran := *job.setup
		cfg := ran.Config.Effective(ran.KVBlocks)
		ran.Cluster.Config = cfg
		run := ran.Run
		run.Name = job.name
		run.Extra = maps.Clone(run.Extra)
		run.Extra["config"] = ran.Cluster.YAML()
		run.Extra["workload"] = job.how
		// The replay ran the input run's workload: a simulated sweep is
		// a sweep (stats' labels, the report's sweep view).
		if job.workload != nil {
			wl := *job.workload
			run.Workload = &wl
		}
		if job.of != "" {
			run.Extra["replay_of"] = job.of
		}
		var metrics *metricsout.Recorder
		if side.metrics != "" {
			if metrics, err = side.recorder(run, job.startUnixN); err != nil {
				return nil, err
			}
		}
		start := time.Now()
		task := meter.Start(replayTaskName(job.name, len(jobs)), "requests", int64(job.in.Len()))
		count := task.Counter() // one increment per request; the task hears every progress.Every
		runCfg, in := cfg, job.in
		keep := job.in.Len() <= plan.streamAbove
		opt := replay.Options{PerSecond: perSecond != "" || metrics != nil, Transient: !keep, KeepRecords: keep, Offload: job.setup.Offload, DecodeOffload: job.setup.DecodeOffload, Prefill: job.setup.Prefill.Options()}
		var carried *calibrate.Carried
		if job.after != nil {
			if carried, err = calibrate.CarryAfter(cfg, job.setup.Step, job.setup.KVBlocks, job.after, job.in, opt); err != nil {
				return nil, fmt.Errorf("run %s: %w", job.name, err)
			}
			runCfg, in = carried.Config, carried.Inputs
			run.Extra["carried_after"] = job.afterOf
		}
		// Made once nothing can return before the replay: the in-memory
		// summary's goroutine ends only when finish closes its feed.
		var mem *memSummary
		var sum *analyze.StreamSummarizer // the streamed summary's first pass, as records are written
		if keep {
			mem = newMemSummary(run, analyze.Options{SelectITL: plan.printed, ITLPercentiles: report.DefaultPercentiles})
		} else {
			sum = analyze.NewStreamSummarizer(run, analyze.StreamOptions{Percentiles: report.DefaultPercentiles})
		}
		st, err := replay.RunInputs(runCfg, job.setup.Step, job.setup.KVBlocks, in, func(r *trace.Request) error {
			if carried != nil && !carried.Keep(r) {
				return nil
			}
			count.Inc()
			r.Run = job.name
			job.client.ApplyRecord(r)
			if r.Model == "" {
				r.Model = run.Model
			}
			if keep {
				mem.add(r)
			} else {
				sum.Add(r)
			}
			if metrics != nil {
				metrics.Add(r)
			}
			return w.Write(r)
		}, opt) // the writer copies what it needs
		if shared && len(done) == len(jobs)-1 {
			// The last run has replayed, and every record is kept.
			defer pauseGC()()
		}
		var memDone <-chan *analyze.Summary
		if keep {
			memDone = mem.finish()
		}
		if err != nil {
			task.Abort()
			return nil, fmt.Errorf("run %s: %w", job.name, err)
		}
		count.Flush()
		// The wall time covers the records written (the last row group
		// may still be encoding), so users can see the replay's speed
		// apart from the summary's. Off a terminal, the task's timing
		// line prints it, with the rate; on one, the bar shows it.
		wall := time.Since(start).Seconds()
		task.Detail(human.Count(int64(math.Round(float64(st.Requests)/wall))) + " requests/s")
		task.Finish()
		if metrics != nil {
			kv := ran.FleetKVBlocks()
			for _, s := range st.Seconds {
				metrics.AddSecond(s, kv)
			}
			if err := writeMetrics(side.metrics, metrics); err != nil {
				return nil, fmt.Errorf("--metrics-out: %w", err)
			}
			fmt.Fprintf(stderr, "wrote %s: %s metrics every %v from %s\n", side.metrics, deploy.EngineName(cfg), side.interval(), metrics.Start().UTC().Format(time.RFC3339))
		}
		if side.plannerLog != "" {
			if err := writePlannerLog(side.plannerLog, cmp.Or(cfg.Disaggregation.Planner.Policy, cfg.Planner.Policy), cfg.Planner.Policy != "", st.Planner); err != nil {
				return nil, fmt.Errorf("--planner-log: %w", err)
			}
			fmt.Fprintf(stderr, "wrote %s: %d planner adjustments\n", side.plannerLog, len(st.Planner))
		}
		if perSecond != "" {
			readyWorkers(st.Seconds, st.Fleet, cfg)
			if err := writeSeconds(perSecond, &ran, job.name, st.Seconds); err != nil {
				return nil, err
			}
		}
		how := job.how
		if carried != nil {
			how += fmt.Sprintf("; after run %s's %d requests, unrecorded but counted here", job.afterOf, job.after.Len())
		}
		fmt.Fprintf(stderr, "%s: %d simulated requests (%s; %d rejected, %d timed out, %d preemptions, %d steps in %d events, %.1f s simulated) on %s\n",
			job.name, st.Requests, how, st.Rejected, st.TimedOut, st.Preemptions, st.Steps, st.Events, st.End.Seconds(), human.Plural(cfg.Workers, "worker"))
		fmt.Fprintf(stderr, "%s: %s; KV cache %s per worker\n", job.name, job.setup.Header(), job.setup.KVHow)
		if st.Fleet != nil {
			lines := fleetText(cfg, st)
			for _, l := range lines {
				fmt.Fprintf(stderr, "%s: %s\n", job.name, l)
			}
			// The summaries under way hold the map as it was.
			run.Extra = maps.Clone(run.Extra)
			run.Extra["fleet"] = strings.Join(lines, "\n")
			run.Extra["gpu_hours"] = strconv.FormatFloat(st.GPUHours, 'g', -1, 64)
			if st.Held > 0 {
				fmt.Fprintf(stderr, "%s: %d requests waited at the gateway for a ready worker (scale to zero), the longest %.3f s\n",
					job.name, st.Held, st.HeldMaxSec)
			}
		}
		runs = append(runs, run)
		// A kept run's summary is finished on its goroutine while the
		// next job replays and the file's last row groups are written.
		var label string
		if job.ofLabel != "" {
			label = "replays " + job.ofLabel
		}
		done = append(done, replayed{run: run, label: label, sum: sum, memDone: memDone})
	}
	// What is written so far, all but the last row group, goes to disk
	// while the last is encoded and the summaries finish, so that
	// Commit's sync, at the end, has only the rest to wait for (an 8 MB
	// file took 20–36 ms to sync here). Its error is checked before the
	// Commit: a failed write-back may not be reported twice.
	synced := make(chan error, 1)
	go func() { synced <- f.Sync() }()
	w.SetRuns(runs)
	// The file is closed and synced to disk while the summaries finish.
	written := make(chan error, 1)
	go func() {
		err := w.Close()
		if serr := <-synced; err == nil {
			err = serr
		}
		if err != nil {
			written <- err
			return
		}
		written <- f.Commit()
	}()
	for i := range done {
		if done[i].memDone != nil {
			done[i].mem = <-done[i].memDone
		}
	}
	if err := <-written; err != nil {
		return nil, err
	}
	fmt.Fprintf(stderr, "wrote %s: %s\n", out, human.Plural(len(runs), "run"))
	for i := range done {
		if done[i].mem != nil {
			continue
		}
		// A bar on a terminal only: the line below times the passes.
		var bars *progress.Meter
		if meter.Terminal() {
			bars = meter
		}
		task := bars.Start("summary of "+done[i].run.Name, "requests", 0)
		src := countingSource(runSource(out, done[i].run.Name, len(runs) > 1), task)
		start := time.Now()
		if done[i].stream, err = done[i].sum.Finish(src); err != nil {
			task.Abort()
			return nil, fmt.Errorf("%s: run %s: summary: %w", out, done[i].run.Name, err)
		}
		task.Finish()
		n := strconv.Itoa(done[i].stream.Passes) + " passes"
		if done[i].stream.Passes == 1 {
			n = "1 pass"
		}
		fmt.Fprintf(stderr, "%s: exact summary of run %s: %s over the file in %.2f s\n",
			out, done[i].run.Name, n, time.Since(start).Seconds())
	}
	return done, nil
}

// replayTaskName names the progress of replaying run: "replay", or
// "replay RUN" when there are several.
func replayTaskName(run string, runs int) string {
	if runs > 1 {
		return "replay " + run
	}
	return "replay"
}

// runSource scans the summary columns of the simulated file at path, and,
// when the file holds several runs (filter), only the requests of run. As
// parquetSource, it hands out one reused request, valid during the call.
func runSource(path, run string, filter bool) analyze.Source {
	if !filter {
		return parquetSource(path, summaryColumns, summaryColumns) // the first pass was made while writing
	}
	cols := append([]string{"run"}, summaryColumns...)
	return func(yield func(*trace.Request) error) error {
		return trace.ScanColumns(path, cols, func(r *trace.Request) error {
			if r.Run != run {
				return nil
			}
			return yield(r)
		})
	}
}

// writeReplayed prints each run's summary, made in memory or by passes
// over the file: the same vLLM-style block with the same numbers.
func writeReplayed(w io.Writer, done []replayed) error {
	for i, d := range done {
		if i > 0 {
			if _, err := io.WriteString(w, "\n"); err != nil {
				return err
			}
		}
		s := d.mem
		if s == nil {
			s = d.stream
		}
		s.Label = d.label
		s.Run.Extra = d.run.Extra // with what the replay added (its fleet)
		if err := report.WriteStats(w, []*analyze.Summary{s}, report.StatsOptions{}); err != nil {
			return err
		}
	}
	return nil
}

// sendLikeTheBenchmark handles requests that carry no arrival times, which
// the open loop cannot replay: a benchmark run at an infinite rate sent
// everything at once (vLLM's and SGLang's "inf"), or kept max_concurrency
// requests in flight, so the run is replayed as that closed loop; a vLLM
// benchmark_serving run at a finite Poisson rate gets the arrivals its
// client drew (vllmArrivals). In every other case the configuration and
// inputs stand (and the engine explains what is missing).
func sendLikeTheBenchmark(cfg replay.Config, run trace.Run, in replay.Inputs, arrivals bool) (replay.Config, replay.Inputs, string) {
	if cfg.Workload.Mode != "" && cfg.Workload.Mode != replay.ModeOpen || arrivals {
		return cfg, in, "trace"
	}
	w := run.Workload
	if w == nil {
		return cfg, in, "trace"
	}
	n := in.Len()
	if !math.IsInf(float64(w.RequestRate), 1) {
		if at, how, ok := vllmArrivals(run, n); ok {
			return cfg, arrivalsAt{in, at}, how
		}
		return cfg, in, "trace"
	}
	clients := n
	if w.Concurrency > 0 && w.Concurrency < clients {
		clients = w.Concurrency
	}
	cfg.Workload.Mode, cfg.Workload.Clients = replay.ModeClosed, clients
	return cfg, in, fmt.Sprintf("trace sent as the benchmark did: infinite rate, %d in flight", clients)
}

// vllmArrivals regenerates the send times of the n requests of a vLLM
// benchmark_serving run that recorded a finite rate but no arrival times,
// as its client drew them: main seeds numpy's global generator with
// --seed (not saved in the result; its default is 0), the ShareGPT
// sampler shuffles with Python's random module and leaves numpy's stream
// untouched, and get_request sends request 0 at once and sleeps
// numpy.random.gamma(shape=burstiness, scale=1/(rate·burstiness)) after
// each (benchmarks/benchmark_serving.py and benchmark_dataset.py of vLLM
// 0.8). Only Poisson runs (burstiness 1: the gamma is numpy's legacy
// exponential, internal/numpyrand) of a dataset that draws nothing from
// numpy (sharegpt, the default) without a concurrency cap qualify. The
// times are when the client meant to send, not when asyncio woke it.
func vllmArrivals(run trace.Run, n int) ([]trace.Time, string, bool) {
	w := run.Workload
	rate := float64(w.RequestRate)
	switch {
	case run.Source != "vllm-bench", !(rate > 0), w.Burstiness != 0 && w.Burstiness != 1,
		w.Dataset != "" && w.Dataset != "sharegpt", w.Concurrency > 0 && w.Concurrency < n:
		return nil, "", false
	}
	g := numpyrand.NewLegacy(0)
	at := make([]trace.Time, n)
	var t float64
	for i := range at {
		at[i] = trace.TimeFromSeconds(t)
		t += g.Exponential(1 / rate)
	}
	return at, fmt.Sprintf("trace, arrivals as vLLM's benchmark_serving drew them: Poisson at %s req/s, numpy seed 0", strconv.FormatFloat(rate, 'g', -1, 64)), true
}

// arrivalsAt is Inputs with request i sent at at[i].
type arrivalsAt struct {
	replay.Inputs
	at []trace.Time
}

// Request returns request i of the inputs with its arrival set.
func (a arrivalsAt) Request(i int) *trace.Request {
	r := a.Inputs.Request(i)
	r.Arrival = trace.Some(a.at[i])
	r.IntendedArrival = trace.Some(a.at[i])
	return r
}

// carryOver sets each job's run before when the two ran one after the
// other on one server with the same prompts (calibrate.SameSession) and
// its workers keep a prefix cache (--carry-cache auto), or always after
// the first (on), and says so on stderr.
func carryOver(jobs []replayJob, runs []trace.Run, carry string, stderr io.Writer) {
	for k := 1; k < len(jobs) && carry != "off"; k++ {
		same, _ := calibrate.SameSession(runs[k-1], runs[k], jobs[k-1].in, jobs[k].in)
		if carry == "on" || same && prefixCaching(jobs[k].setup.Config) {
			jobs[k].after, jobs[k].afterOf = jobs[k-1].in, jobs[k-1].of
			fmt.Fprintf(stderr, "run %s: replayed after run %s with the prefix cache it left (--carry-cache %s)\n", jobs[k].of, jobs[k-1].of, carry)
		}
	}
}

// skipped counts the planner's adjustments that changed nothing for
// want of what to decide on (PlannerAdjustment.Skipped).
func skipped(log []replay.PlannerAdjustment) int {
	n := 0
	for _, a := range log {
		if a.Skipped {
			n++
		}
	}
	return n
}

// enginesText says what the planner's engine is with data parallelism:
// a server of its ranks, each pool's when they differ ("" otherwise).
func enginesText(p replay.PlannerConfig) string {
	switch {
	case p.PrefillReplicaWorkers > 0 && p.PrefillReplicaWorkers != max(p.ReplicaWorkers, 1):
		return fmt.Sprintf(", engines servers of %d workers (prefill) and %d (decode)", p.PrefillReplicaWorkers, max(p.ReplicaWorkers, 1))
	case p.ReplicaWorkers > 1:
		return fmt.Sprintf(", engines servers of %d workers", p.ReplicaWorkers)
	}
	return ""
}

// fleetText says what an autoscaled replay's fleet did, a line each: its
// GPU-hours and its ready workers per whole second (the last second is
// partial), the least, the most and the mean, and with disaggregation
// each pool's. The replay prints the lines after its run's name, and
// the run keeps them (its "fleet" extra key) for stats and the report.
func fleetText(cfg replay.Config, st replay.Stats) []string {
	var lines []string
	say := func(format string, args ...any) { lines = append(lines, fmt.Sprintf(format, args...)) }
	whole := st.Fleet[:max(1, len(st.Fleet)-1)]
	spread := func(ready func(replay.FleetSecond) float64) string {
		lo, hi, sum := math.Inf(1), 0.0, 0.0
		for _, f := range whole {
			lo, hi, sum = min(lo, ready(f)), max(hi, ready(f)), sum+ready(f)
		}
		return fmt.Sprintf("%.2f to %.2f, mean %.2f", lo, hi, sum/float64(len(whole)))
	}
	d := cfg.Disaggregation
	// servers says what a replica is with data parallelism.
	servers := func(a replay.AutoscaleConfig) string {
		if a.ReplicaWorkers > 1 {
			return fmt.Sprintf(", replicas servers of %d workers", a.ReplicaWorkers)
		}
		return ""
	}
	if p := cfg.Planner; p.Policy != "" {
		say("scaled by Dynamo's planner on load (optimization_target %s: %s; every %g s, %d GPUs%s): %d adjustments, %d skipped (still scaling); %.3f GPU-hours; ready workers per whole second %s",
			p.OptimizationTarget, p.ThresholdsText(true), p.AdjustmentIntervalSec, p.MaxGPUBudget, enginesText(p), len(st.Planner), skipped(st.Planner),
			st.GPUHours, spread(func(f replay.FleetSecond) float64 { return f.Ready }))
		return lines
	}
	if !d.PrefillAutoscale.On() && !d.DecodeAutoscale.On() && d.Planner.Policy == "" {
		say("autoscaled on %s%s: %.3f GPU-hours; ready workers per whole second %s",
			cfg.Autoscale.MetricNames(), servers(cfg.Autoscale), st.GPUHours, spread(func(f replay.FleetSecond) float64 { return f.Ready }))
		return lines
	}
	say("pools autoscaled: %.3f GPU-hours; ready workers per whole second %s",
		st.GPUHours, spread(func(f replay.FleetSecond) float64 { return f.Ready }))
	if d.Planner.Policy != "" {
		pred := d.Planner.Predictor + " predictor"
		if d.Planner.Predictor == replay.PredictorKalman {
			pred = fmt.Sprintf("Kalman predictor, q_level %g, q_trend %g, r %g", d.Planner.KalmanQLevel, d.Planner.KalmanQTrend, d.Planner.KalmanR)
			if d.Planner.PredictorLog1p {
				pred += ", log1p"
			}
		}
		engines := enginesText(d.Planner)
		if g := d.Planner.PrefillGPUsPerWorker; g != 0 && g != d.Planner.GPUsPerWorker {
			engines += fmt.Sprintf(", %d GPUs a prefill worker and %d a decode worker", g, d.Planner.GPUsPerWorker)
		}
		if d.Planner.Policy == replay.PlannerDynamoLoad {
			say("both pools scaled by Dynamo's planner on load (optimization_target %s: %s; every %g s, %d GPUs%s): %d adjustments, %d skipped (a pool still scaling)",
				d.Planner.OptimizationTarget, d.Planner.ThresholdsText(false), d.Planner.AdjustmentIntervalSec, d.Planner.MaxGPUBudget, engines, len(st.Planner), skipped(st.Planner))
		} else {
			say("both pools planned by Dynamo's SLA planner (TTFT %g s, ITL %g s, every %g s, %d GPUs, %s%s): %d adjustments, %d skipped (nothing completed)",
				d.Planner.TTFTSec, d.Planner.ITLSec, d.Planner.AdjustmentIntervalSec, d.Planner.MaxGPUBudget, pred, engines, len(st.Planner), skipped(st.Planner))
		}
	}
	for _, p := range []struct {
		name  string
		a     replay.AutoscaleConfig
		ready func(replay.FleetSecond) float64
	}{
		{"prefill", d.PrefillAutoscale, func(f replay.FleetSecond) float64 { return f.PrefillReady }},
		{"decode", d.DecodeAutoscale, func(f replay.FleetSecond) float64 { return f.DecodeReady }},
	} {
		how := "no autoscaler"
		switch {
		case p.a.On():
			how = "autoscaled on " + p.a.MetricNames() + servers(p.a)
		case d.Planner.Policy != "":
			how = "the planner's"
		}
		say("%s pool (%s): ready workers per whole second %s", p.name, how, spread(p.ready))
	}
	return lines
}
