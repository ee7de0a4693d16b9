package calibrate

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"

	"github.com/opaltrace/opaltrace/model"
	"github.com/opaltrace/opaltrace/replay"
	"github.com/opaltrace/opaltrace/trace"
)

// A ReplayRun is one measured run for FitReplay: how to replay it (its
// deployment's roofline at default coefficients, the workers'
// configuration, KV capacity and the requests to send) and what was
// observed. Train runs are fitted; the others are held out and only
// predicted.
type ReplayRun struct {
	Label      string // what distinguishes the run ("#3 rate=4")
	Run        trace.Run
	Deployment *model.Deployment
	Config     replay.Config
	KVBlocks   int64
	Inputs     replay.Inputs
	Targets    []Target
	Train      bool
	// After, when set, is the run this one followed on the same server
	// (SameSession): it is replayed first, unmeasured, so that this run
	// starts with the prefix cache it left (carry.go).
	After *ReplayRun
	// Offload, when not nil, is the workers' KV tiers
	// (replay.Options.Offload): a run measured with a CPU tier or
	// SGLang's HiCache is replayed with them, its links as the
	// deployment gives them (not fitted).
	// DecodeOffload is the decode pool's own tiers beside a prefill
	// pool of its own (replay.Options.DecodeOffload).
	Offload, DecodeOffload *replay.Offload
	// Prefill, when not nil, is the prefill pool's own deployment under
	// disaggregation, on the cluster's GPU (package deploy: prefill_tp,
	// prefill_scheduler), whose workers have PrefillKVBlocks each: its
	// steps are priced by the same coefficients on its deployment, as
	// one GPU's coefficients price any layout of it.
	Prefill         *model.Deployment
	PrefillKVBlocks int64
}

// deployments returns the deployments of run's workers: the cluster's,
// and the prefill pool's when it has its own.
func (run *ReplayRun) deployments() []*model.Deployment {
	if run.Prefill != nil {
		return []*model.Deployment{run.Deployment, run.Prefill}
	}
	return []*model.Deployment{run.Deployment}
}

// options returns the options of run's replays under cm: its KV tiers,
// and its prefill pool priced by cm.
func (run *ReplayRun) options(cm *CostModel) (replay.Options, error) {
	o := replay.Options{Transient: true, Offload: run.Offload, DecodeOffload: run.DecodeOffload}
	if run.Prefill != nil {
		d := *run.Prefill
		step, err := cm.StepModel(&d)
		if err != nil {
			return o, err
		}
		o.Prefill = &replay.PoolModel{Cost: step, KVBlocks: run.PrefillKVBlocks}
	}
	return o, nil
}

// ReplayOptions control FitReplay.
type ReplayOptions struct {
	// Free are the coefficients to fit; nil chooses them from what the
	// training runs can determine (see defaultFree).
	Free []string
	// Also are coefficients fitted besides the default choice (Free
	// nil), its warning for them dropped: what a user who knows the
	// runs determine one the default leaves out asks for (--fit +NAME).
	Also []string
	// Fixed are coefficients held at a given value (not fitted).
	Fixed map[string]float64
	// Start, when set, are the coefficients the fit starts from and the
	// prior pulls towards instead of the defaults: another fit's, of the
	// same GPU and engine (--start-from). Those not fitted are held at
	// them, so that what the training runs cannot determine stays where
	// that fit put it; StartFrom names it for the provenance.
	Start     map[string]float64
	StartFrom string
	// PriorWeight weighs a coefficient's log distance from its starting
	// value (its default or Fixed's) against the squared log errors of
	// the targets: a weak prior keeps what the runs do not determine
	// near its default instead of wandering (default 0.01; negative: 0).
	PriorWeight float64
	// Restarts is how many times the descent restarts from the best
	// minimum found so far, moved (restart.go): 0 means DefaultRestarts,
	// a negative number none.
	Restarts int
	// MaxEvals bounds each descent's evaluations of the objective (each
	// replays every training run); a first descent that reaches it has not
	// converged (default 300).
	MaxEvals int
	// Parallel is how many replays run at once (default 2).
	Parallel int
	// Source names the inputs, for the provenance.
	Source string
	// Progress, when not nil, is called after each batch of the
	// objective's evaluations with the number made so far (at most
	// MaxEvals × (1 + restarts)), so a command can show the fit's progress.
	Progress func(evaluations int)
	// SaturationTTFT is the p99 TTFT (seconds) above which a run counts
	// as saturated in the fit's Saturation (default
	// DefaultSaturationTTFT).
	SaturationTTFT float64
}

// A ReplayFit is the provenance of coefficients fitted by replay in the
// loop, and their error per run and target, as costmodel.yaml keeps it.
type ReplayFit struct {
	Optimiser   string   `yaml:"optimiser"`
	Source      string   `yaml:"source,omitempty"`
	Free        []string `yaml:"free"`
	Fixed       []string `yaml:"fixed,omitempty"`
	Evaluations int      `yaml:"evaluations"`
	Objective   float64  `yaml:"objective"`
	// Uncalibrated is the objective at the starting coefficients: the
	// defaults, or StartFrom's.
	Uncalibrated float64 `yaml:"uncalibrated_objective"`
	// StartFrom names the cost model the fit started from and held what
	// it did not fit at (ReplayOptions.StartFrom), "" for the defaults.
	StartFrom string     `yaml:"start_from,omitempty"`
	Rows      []ErrorRow `yaml:"rows"`
	// Saturation is the load step where p99 TTFT first exceeds
	// ReplayOptions.SaturationTTFT, observed and predicted.
	Saturation *Saturation `yaml:"saturation"`
}

// An ErrorRow is one run × target of the error table: observed,
// simulated with the default coefficients and with the fitted ones, and
// the relative errors (simulated/observed − 1).
type ErrorRow struct {
	Run          string  `yaml:"run" json:"run"`
	Label        string  `yaml:"label" json:"label"`
	Target       string  `yaml:"target" json:"target"`
	Set          string  `yaml:"set" json:"set"` // "train" (in-sample) or "holdout"
	Observed     float64 `yaml:"observed_s" json:"observed_s"`
	Uncalibrated float64 `yaml:"uncalibrated_s" json:"uncalibrated_s"`
	Calibrated   float64 `yaml:"calibrated_s" json:"calibrated_s"`
	UncalErr     float64 `yaml:"uncalibrated_rel_err" json:"uncalibrated_rel_err"`
	CalErr       float64 `yaml:"calibrated_rel_err" json:"calibrated_rel_err"`
	Reported     bool    `yaml:"reported,omitempty" json:"reported,omitempty"` // observed is the source's summary
}

// ErrNotConverged is wrapped by FitReplay's error when the optimiser
// stopped before it converged.
var ErrNotConverged = errors.New("the fit did not converge")

// A coefSpec says how a coefficient enters the search: efficiencies and
// the step overhead on a log scale around their start; the additive
// costs whose default is 0 as |x|·unit.
type coefSpec struct {
	name     string
	log      bool
	fraction bool    // a fraction of a peak, at most 1
	unit     float64 // additive: the value of x = 1
	most     float64 // additive: the largest value (0: unbounded)
	// scan: the coefficient is a bound on the step (a max with the
	// rest of it), with no gradient where it does not bind; the fit
	// starts it at the best of a few values (scanStart).
	scan  bool
	start float64 // default
}

func coefSpecs(dep *model.Deployment) []coefSpec {
	kvStart := dep.KVBandwidthEfficiency
	if kvStart <= 0 {
		kvStart = dep.BandwidthEfficiency
	}
	expertStart := dep.ExpertMFU
	if expertStart <= 0 {
		expertStart = dep.MFU
	}
	return []coefSpec{
		{name: CoefMFU, log: true, fraction: true, start: dep.MFU},
		{name: CoefAttentionMFU, log: true, fraction: true, start: dep.MFU},
		{name: CoefExpertMFU, log: true, fraction: true, start: expertStart},
		{name: CoefBandwidthEff, log: true, fraction: true, start: dep.BandwidthEfficiency},
		{name: CoefKVBandwidthEff, log: true, fraction: true, start: kvStart},
		{name: CoefLinkEff, log: true, fraction: true, start: dep.LinkEfficiency},
		{name: CoefStepOverhead, log: true, start: dep.StepOverhead.Seconds()},
		{name: CoefCollectiveLatency, unit: 10e-6},
		{name: CoefRequestOverhead, unit: 50e-3},
		{name: CoefChunkOverhead, unit: 100e-6},
		{name: CoefAPIServer, unit: 10e-3},
		{name: CoefEagerLayerLaunch, unit: 100e-6},
		{name: CoefEagerLayerCPU, unit: 100e-6, scan: true},
		{name: CoefUncompiledLayer, unit: 100e-6},
		// serial_fraction's unit is its whole range, so that the Jacobian's
		// step (lmStep, 0.05 units) moves it by 0.05, as it moves the
		// efficiencies by 5 %: at a unit of 0.1 the step was 0.005 and
		// measured the jumps of whole batches, not the slope, and the fit
		// stopped near its start (surajssd qps 1 and 4: 0.11 where the
		// profile's minimum is near 0.5; TestFitReplayRecoversSerial-
		// FractionFromLightRuns: 0.06 against 0.5).
		{name: CoefSerialFraction, unit: 1, most: 1},
	}
}

// The from of the coefficients FitReplay fitted (see coefRange).
const (
	replayFitFrom = "replay fit"
	tiedToMFUFrom = "tied to mfu"
)

// ReplayCoefficients are the coefficients FitReplay can fit.
var ReplayCoefficients = []string{CoefMFU, CoefAttentionMFU, CoefExpertMFU, CoefBandwidthEff, CoefKVBandwidthEff, CoefLinkEff, CoefStepOverhead,
	CoefCollectiveLatency, CoefRequestOverhead, CoefChunkOverhead, CoefAPIServer, CoefEagerLayerLaunch, CoefEagerLayerCPU, CoefUncompiledLayer, CoefSerialFraction}

// minKVShare is the least share of the training runs' memory time that
// KV reads and writes must have (in a replay at the default
// coefficients) for defaultFree to fit their bandwidth efficiency apart
// from the weights': below it a change of the KV efficiency moves the
// targets as a change of the weights' efficiency does, at a fraction of
// the size, and the fit extrapolates it freely to loads it never saw.
const minKVShare = 0.2

// defaultFree chooses what the training runs can determine: the compute
// and weight bandwidth efficiencies and the fixed cost per step always;
// the KV bandwidth efficiency when the KV traffic of some training run
// is at least minKVShare of its memory traffic (kvShare: a loaded or
// offline run, not only light ones); the client overhead per request
// when a run measured at the client (TTFT), as engine timestamps do not
// include it; the launch time of a layer without a CUDA graph when a
// run's engine replays graphs only up to a batch size (SGLang's
// cuda_graph_max_bs: large decode batches and prefill steps launch
// eagerly); the latency of a collective only when the runs span layouts
// with different numbers of collectives per step, since on one layout it
// is a fixed cost per step like the step overhead; the share of the
// lesser of compute and memory time a step does not overlap
// (serial_fraction) when some training run decodes a fifth of its tokens
// in memory-bound steps and some a fifth in compute-bound ones
// (shares.serialWarning); the routed experts' compute efficiency when
// some training run's model has routed experts (expertRuns; it is not
// offered otherwise). The rest keep their defaults, and a warning says
// why; the extra cost of a layer not torch-compiled, the host's launch
// time as a bound on eager steps (eager_layer_cpu_s: README, issue 13's
// decode price) and the API server's
// serial time per request are only fitted when asked for, with a warning
// saying whether the runs could determine them (shares.uncompiledWarning;
// burstRuns: a burst is needed, and one of long prompts queues at the
// prefill instead, as on the DataCrunch 70B's offline runs, where the
// default fit with it put it at 0 and settled in a worse minimum, its
// held-out errors larger: README).
func defaultFree(runs []*ReplayRun, sh shares) (free []string, warnings []string) {
	free = []string{CoefMFU, CoefBandwidthEff, CoefStepOverhead}
	if sh.kv >= minKVShare {
		free = append(free, CoefKVBandwidthEff)
	} else {
		warnings = append(warnings, fmt.Sprintf("%s not fitted: KV reads and writes are at most %.0f %% of any training run's memory traffic (under %.0f %%), too little to tell their efficiency from the weights' (train on a loaded or offline run too, or --fit it)", CoefKVBandwidthEff, 100*sh.kv, 100*minKVShare))
	}
	if w := sh.uncompiledWarning(); w != "" {
		warnings = append(warnings, w)
	}
	if w := sh.serialWarning(); w != "" {
		warnings = append(warnings, w)
	} else {
		free = append(free, CoefSerialFraction)
	}
	if expertRuns(runs) {
		free = append(free, CoefExpertMFU)
	}
	client, eager := false, false
	colls := map[float64]bool{}
	for _, r := range runs {
		if !r.Train {
			continue
		}
		for _, d := range r.deployments() {
			eager = eager || d.CUDAGraphMaxBS != 0
			colls[d.Terms(&model.Batch{Decode: []int64{1}}).Collectives] = true
		}
		for _, t := range r.Targets {
			client = client || t.Metric == MetricTTFT
		}
	}
	if client {
		free = append(free, CoefRequestOverhead)
	}
	if burstRuns(runs) {
		warnings = append(warnings, fmt.Sprintf("%s not fitted unless asked: a training run sends a burst, but a burst of long prompts queues at the prefill, not at the API server, and cannot determine it (--fit it when the burst's prompts are short or cached)", CoefAPIServer))
	} else {
		warnings = append(warnings, fmt.Sprintf("%s not fitted: no training run sends a burst (a tenth of its requests within %v of the one before), so requests never queue at the API server and its time per request is a delay the per-request overhead already is (train on a run of rate inf or of a maximum concurrency, or --fix it)", CoefAPIServer, burstGap))
	}
	if eager {
		free = append(free, CoefEagerLayerLaunch)
		warnings = append(warnings, fmt.Sprintf("%s not fitted unless asked: the host's launch time bounds an eager step only where the step's GPU work is shorter (a decode batch just above cuda_graph_max_bs, a small prefill), and a fit of it has not yet been shown to predict held-out loads better than %s's additive launches (--fit it, with --fix %s=0)", CoefEagerLayerCPU, CoefEagerLayerLaunch, CoefEagerLayerLaunch))
	}
	if len(colls) > 1 {
		free = append(free, CoefCollectiveLatency)
	} else {
		warnings = append(warnings, fmt.Sprintf("%s not fitted: every training run has the same layout, on which a collective's latency is a fixed cost per step the step overhead already absorbs (train on two layouts, or --fix it)", CoefCollectiveLatency))
	}
	warnings = append(warnings,
		fmt.Sprintf("%s not fitted: tied to mfu (--fit it when the runs have long prompts at several lengths)", CoefAttentionMFU),
		fmt.Sprintf("%s not fitted: the ITL quantiles of serving runs rarely separate it from the decode step's time (--fit it when the client was the bottleneck)", CoefChunkOverhead))
	return free, warnings
}

// A candidate is one point of the search: a full set of coefficients.
type candidate map[string]float64

// costModel is the candidate as a cost model: what replay would read
// from the costmodel.yaml written from it, so that a step is priced
// during the fit exactly as replay prices it.
func (c candidate) costModel() *CostModel {
	cm := &CostModel{Version: CostModelVersion, Form: model.FormRoofline, Coefficients: map[string]Coefficient{}}
	for name, v := range c {
		if v > 0 {
			cm.Coefficients[name] = Coefficient{Value: v, Unit: coefUnits[name]}
		}
	}
	return cm
}

// PrepareReplay returns what replays run with the coefficients of cm:
// its step model over a copy of dep (cm.StepModel, as replay uses it),
// cfg with the client's per-request overhead, and the per-chunk overhead
// to apply to each simulated record. Calibration and replay both use it.
func PrepareReplay(cm *CostModel, dep *model.Deployment, cfg replay.Config) (model.StepModel, replay.Config, ClientOverhead, error) {
	d := *dep
	step, err := cm.StepModel(&d)
	if err != nil {
		return nil, cfg, ClientOverhead{}, err
	}
	o := cm.clientOverhead()
	o.ApplyConfig(&cfg)
	return step, cfg, o, nil
}

// simulate replays run with cm's coefficients and returns its latencies.
func simulate(run *ReplayRun, cm *CostModel) (map[string][]float64, error) {
	step, cfg, client, err := PrepareReplay(cm, run.Deployment, run.Config)
	if err != nil {
		return nil, err
	}
	opt, err := run.options(cm)
	if err != nil {
		return nil, err
	}
	inputs, keep := run.Inputs, (*trace.Request).OK
	if run.After != nil {
		// Replayed after the run before it, with the cache it left;
		// only this run's requests are measured (Carried.Keep).
		c, err := CarryAfter(cfg, step, run.KVBlocks, run.After.Inputs, run.Inputs, opt)
		if err != nil {
			return nil, fmt.Errorf("run %s after %s: %w", run.Run.Name, run.After.Run.Name, err)
		}
		cfg, inputs = c.Config, c.Inputs
		keep = func(r *trace.Request) bool { return c.Keep(r) && r.OK() }
	}
	lat := map[string][]float64{}
	_, err = replay.RunInputs(cfg, step, run.KVBlocks, inputs, func(r *trace.Request) error {
		if !keep(r) {
			return nil
		}
		client.ApplyRecord(r)
		addLatencies(lat, r)
		return nil
	}, opt)
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", run.Run.Name, err)
	}
	return lat, nil
}

// evaluate replays every run of runs (parallel at a time) with cm and
// returns each run's simulated targets, in order.
func evaluate(runs []*ReplayRun, cm *CostModel, parallel int) ([][]float64, error) {
	out, err := evaluateMany(runs, []*CostModel{cm}, parallel)
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// evaluateMany replays every run of runs with each of cms, parallel
// replays at a time over all of them, and returns per cost model each
// run's simulated targets, in order, then the extra ones.
func evaluateMany(runs []*ReplayRun, cms []*CostModel, parallel int, extra ...Target) ([][][]float64, error) {
	out := make([][][]float64, len(cms))
	for k := range cms {
		out[k] = make([][]float64, len(runs))
	}
	err := inParallel(len(cms)*len(runs), parallel, func(j int) error {
		k, i := j/len(runs), j%len(runs)
		r := runs[i]
		lat, err := simulate(r, cms[k])
		if err != nil {
			return err
		}
		out[k][i] = simulated(append(r.Targets[:len(r.Targets):len(r.Targets)], extra...), lat)
		return nil
	})
	return out, err
}

// inParallel calls f(0), …, f(n−1), at most parallel (at least 1) at a
// time, and returns their errors joined in index order.
func inParallel(n, parallel int, f func(i int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, max(parallel, 1))
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = f(i)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// logErr is a target's error on the log scale: symmetric in over- and
// underestimates, so a run at 100 ms and one at 100 s weigh alike. A
// simulated statistic that is missing (no ITL) costs as a factor of e³.
// Two figures below latencyResolution agree (relErr), and an observed one
// below it counts as at it.
func logErr(sim, obs float64) float64 {
	switch {
	case math.IsNaN(sim):
		return 3
	case agreeAsNone(sim, obs):
		return 0
	case !(sim > 0):
		return 3
	}
	return math.Log(sim / max(obs, latencyResolution))
}

// latencyResolution is the least latency a target compares as such:
// below it a time says only "none", as the median queue time of a server
// that seldom queues does (the LLMServingSim Qwen3-30B-A3B run's is
// 4.4 µs, scheduled at the engine's next pass, where the replay's is 0).
// Relative to such a figure, an error is noise: 0 against 4.4 µs was
// −100 %, and 1 ms +22,600 %. A millisecond is shorter than any engine
// step, and than any TTFT, ITL or E2E figure a run reports.
const latencyResolution = 1e-3

// relErr is sim's error relative to obs (sim/obs − 1), 0 when both are
// below latencyResolution.
func relErr(sim, obs float64) float64 {
	if agreeAsNone(sim, obs) {
		return 0
	}
	return sim/obs - 1
}

// agreeAsNone reports whether a simulated and an observed latency are
// both below latencyResolution, where they agree whatever their ratio.
func agreeAsNone(sim, obs float64) bool {
	return sim >= 0 && sim < latencyResolution && obs < latencyResolution
}

// A replayProblem is the least-squares problem FitReplay solves: the
// training runs, the coefficients searched (x ↦ candidate), the box of x,
// and the residuals of any points, replayed in parallel.
type replayProblem struct {
	opts      ReplayOptions // with defaults applied
	train     []*ReplayRun
	free      []string
	fixed     []string // "name=value", sorted
	freeSpecs []coefSpec
	warnings  []string // why coefficients were left out of defaultFree
	nTargets  int
	prior     float64

	tieAttention bool
	toCand       func(x []float64) candidate
	// defaults are the coefficients of the uncalibrated replay: the
	// defaults and Fixed, not Start.
	defaults     candidate
	lower, upper []float64
	residuals    residualFunc
}

// newReplayProblem sets up the fit of runs by opts (see FitReplay).
func newReplayProblem(runs []*ReplayRun, opts ReplayOptions) (*replayProblem, error) {
	var train []*ReplayRun
	for _, r := range runs {
		if r.Train {
			train = append(train, r)
		}
	}
	if len(train) == 0 {
		return nil, errors.New("calibrate: no training run")
	}
	for _, r := range runs {
		if len(r.Targets) == 0 {
			return nil, fmt.Errorf("run %s: %w", r.Run.Name, ErrNoLatencies)
		}
	}
	if opts.MaxEvals <= 0 {
		opts.MaxEvals = 300
	}
	if opts.Parallel <= 0 {
		opts.Parallel = 2
	}
	if !(opts.SaturationTTFT > 0) {
		opts.SaturationTTFT = DefaultSaturationTTFT
	}
	prior := opts.PriorWeight
	if prior == 0 {
		prior = 0.01
	}
	prior = max(prior, 0)

	specs := coefSpecs(train[0].Deployment)
	var warnings []string
	free := opts.Free
	if free != nil && opts.Also != nil {
		return nil, errors.New("calibrate: the coefficients to fit are given both in full and as additions to the default choice")
	}
	if free == nil {
		shares, err := trainShares(train, opts.Parallel)
		if err != nil {
			return nil, err
		}
		free, warnings = defaultFree(runs, shares)
		// What --fix holds is not fitted, whatever the runs could
		// determine (--fix api_server_request_s=0 on a burst).
		free = slices.DeleteFunc(free, func(name string) bool {
			_, ok := opts.Fixed[name]
			return ok
		})
		for _, name := range opts.Also {
			if !slices.Contains(free, name) {
				free = append(free, name)
			}
			warnings = slices.DeleteFunc(warnings, func(w string) bool { return strings.HasPrefix(w, name+" ") })
		}
	}
	byName := map[string]coefSpec{}
	for _, s := range specs {
		byName[s.name] = s
	}
	base := candidate{}
	for _, s := range specs {
		base[s.name] = s.start
	}
	for name, v := range opts.Start {
		if _, ok := byName[name]; !ok {
			return nil, fmt.Errorf("calibrate: start from %s: %s is not a coefficient the replay fit knows (%s)", opts.StartFrom, name, strings.Join(ReplayCoefficients, ", "))
		}
		if !(v >= 0) {
			return nil, fmt.Errorf("calibrate: start from %s: %s %g: want a value of 0 or more", opts.StartFrom, name, v)
		}
	}
	var fixed []string
	for name, v := range opts.Fixed {
		if _, ok := byName[name]; !ok {
			return nil, fmt.Errorf("calibrate: --fix %s: not a coefficient the replay fit knows (%s)", name, strings.Join(ReplayCoefficients, ", "))
		}
		base[name] = v
		fixed = append(fixed, fmt.Sprintf("%s=%g", name, v))
	}
	slices.Sort(fixed)
	defaults := maps.Clone(base)
	for name, v := range opts.Start {
		if _, ok := opts.Fixed[name]; !ok {
			base[name] = v
		}
	}
	var freeSpecs []coefSpec
	for _, name := range free {
		s, ok := byName[name]
		if !ok {
			return nil, fmt.Errorf("calibrate: --fit %s: not a coefficient the replay fit knows (%s)", name, strings.Join(ReplayCoefficients, ", "))
		}
		if _, ok := opts.Fixed[name]; ok {
			return nil, fmt.Errorf("calibrate: %s is both fitted and fixed", name)
		}
		s.start = base[name]
		freeSpecs = append(freeSpecs, s)
	}
	if len(freeSpecs) == 0 {
		return nil, errors.New("calibrate: no coefficient to fit")
	}
	if slices.Contains(free, CoefAPIServer) && !burstRuns(train) {
		return nil, fmt.Errorf("calibrate: --fit %s: no training run sends a burst that would queue at the API server (a tenth of its requests within %v of the one before)", CoefAPIServer, burstGap)
	}
	if slices.Contains(free, CoefExpertMFU) && !expertRuns(train) {
		return nil, fmt.Errorf("calibrate: --fit %s: no training run's model has routed experts", CoefExpertMFU)
	}
	// x → coefficients. Attention efficiency follows MFU unless it is
	// fitted or fixed on its own; KV reads are priced at the weights'
	// bandwidth efficiency unless theirs is.
	// A value of its own from Start is held as a fixed one is.
	given := func(name string) bool {
		_, fixed := opts.Fixed[name]
		_, started := opts.Start[name]
		return fixed || started
	}
	tieAttention := !slices.Contains(free, CoefAttentionMFU) && !given(CoefAttentionMFU)
	kvShared := !slices.Contains(free, CoefKVBandwidthEff) && !given(CoefKVBandwidthEff)
	// The experts are priced at MFU unless their efficiency is fitted or
	// fixed (a deployment's own ExpertMFU, which replay keeps, aside).
	expertShared := !slices.Contains(free, CoefExpertMFU) && !given(CoefExpertMFU)
	// An additive coefficient goes no lower than 0: its start's
	// distance below it in units (0 from a default start, which is 0).
	addLow := func(s coefSpec) float64 {
		if s.start == 0 {
			return 0
		}
		return -s.start / s.unit
	}
	tied := func(c candidate) candidate {
		if tieAttention {
			c[CoefAttentionMFU] = c[CoefMFU]
		}
		if kvShared {
			delete(c, CoefKVBandwidthEff)
		}
		if expertShared {
			delete(c, CoefExpertMFU)
		}
		return c
	}
	toCand := func(x []float64) candidate {
		c := maps.Clone(base)
		for i, s := range freeSpecs {
			if s.log {
				c[s.name] = s.start * math.Exp(x[i])
			} else {
				c[s.name] = s.start + max(x[i], addLow(s))*s.unit
			}
		}
		return tied(c)
	}
	// Additive coefficients do not go below 0 (x ≥ addLow: 0 from a
	// default start), and a fraction of a peak not above the peak (see
	// coefRange).
	lower := make([]float64, len(freeSpecs))
	upper := make([]float64, len(freeSpecs))
	for i, s := range freeSpecs {
		upper[i] = math.Inf(1)
		lower[i] = addLow(s)
		if s.log {
			lower[i] = math.Inf(-1)
		}
		if s.fraction {
			upper[i] = math.Log(1 / s.start)
		}
		if s.most > 0 {
			upper[i] = (s.most - s.start) / s.unit
		}
	}
	nTargets := 0
	for _, r := range train {
		nTargets += len(r.Targets)
	}
	// The residuals: each training target's log error over √N, so that
	// their sum of squares is the mean squared log error, then the prior
	// on each coefficient's distance from its start (an additive cost in
	// units of 10× its unit).
	evaluated := 0
	residuals := func(xs [][]float64) ([][]float64, error) {
		cms := make([]*CostModel, len(xs))
		for k, x := range xs {
			cms[k] = toCand(x).costModel()
		}
		sims, err := evaluateMany(train, cms, opts.Parallel)
		if err != nil {
			return nil, err
		}
		evaluated += len(xs)
		if opts.Progress != nil {
			opts.Progress(evaluated)
		}
		out := make([][]float64, len(xs))
		w := 1 / math.Sqrt(float64(nTargets))
		sp := math.Sqrt(prior)
		for k, x := range xs {
			var r []float64
			for i, run := range train {
				for j, t := range run.Targets {
					r = append(r, w*logErr(sims[k][i][j], t.Observed))
				}
			}
			for i, s := range freeSpecs {
				if s.log {
					r = append(r, sp*x[i])
				} else {
					r = append(r, sp*x[i]/10)
				}
			}
			out[k] = r
		}
		return out, nil
	}
	return &replayProblem{
		opts: opts, train: train, free: free, fixed: fixed, freeSpecs: freeSpecs, warnings: warnings,
		nTargets: nTargets, prior: prior, tieAttention: tieAttention, toCand: toCand, defaults: tied(defaults),
		lower: lower, upper: upper, residuals: residuals,
	}, nil
}

// FitReplay fits the step model's coefficients (and the client's
// overheads) so that replays of the training runs reproduce their
// observed targets: it minimises the mean squared log error of the
// targets, plus a weak prior, by Levenberg–Marquardt (levmar.go) from the
// default coefficients, restarted from the best minimum so far moved along
// every coefficient (restart.go, ReplayOptions.Restarts), keeping the
// lowest (deterministic: the same runs give the same fit). Each
// evaluation replays every training run, Parallel at a time. It returns
// the cost model (the fitted coefficients with the fit's provenance and
// the error table of every run, held-out ones included) or, when the
// optimiser stops before converging, an error wrapping ErrNotConverged.
func FitReplay(runs []*ReplayRun, opts ReplayOptions) (*CostModel, error) {
	p, err := newReplayProblem(runs, opts)
	if err != nil {
		return nil, err
	}
	opts, train, free, fixed, freeSpecs, warnings := p.opts, p.train, p.free, p.fixed, p.freeSpecs, p.warnings
	toCand, nTargets, prior, tieAttention := p.toCand, p.nTargets, p.prior, p.tieAttention
	x0 := make([]float64, len(freeSpecs))
	restarts := opts.Restarts
	switch {
	case restarts == 0:
		restarts = DefaultRestarts
	case restarts < 0:
		restarts = 0
	}
	res, descents, err := restartedLM(p.residuals, x0, p.lower, p.upper, opts.MaxEvals, restarts)
	if err != nil {
		return nil, err
	}
	if res.Converged {
		if res, descents, err = scanDescent(p.residuals, freeSpecs, res, descents, p.lower, p.upper, opts.MaxEvals); err != nil {
			return nil, err
		}
	}
	evals, f0 := res.Evals, res.F0
	if !res.Converged {
		return nil, fmt.Errorf("calibrate: %w after %d replays of the %d training runs (objective %.4g from %.4g): nothing written; raise --max-evals or fit fewer coefficients",
			ErrNotConverged, evals, len(train), res.F, f0)
	}
	best := toCand(res.X)

	// The error table: every run with the default and the fitted
	// coefficients, and past each run's targets its p99 TTFT, for the
	// saturation step.
	p99TTFT := Target{Metric: MetricTTFT, Stat: "p99"}
	both, err := evaluateMany(runs, []*CostModel{p.defaults.costModel(), best.costModel()}, opts.Parallel, p99TTFT)
	if err != nil {
		return nil, err
	}
	uncal, cal := both[0], both[1]
	satRuns := make([]saturationInput, len(runs))
	for i, r := range runs {
		rate := math.NaN()
		if w := r.Run.Workload; w != nil {
			rate = float64(w.RequestRate)
		}
		last := len(r.Targets)
		satRuns[i] = saturationInput{label: r.Label, rate: rate, targets: r.Targets, uncal: uncal[i][last], cal: cal[i][last]}
	}
	scanned := ""
	for _, s := range freeSpecs {
		if s.scan {
			scanned += fmt.Sprintf("; then %s scanned at the best minimum (%g to %g units of %g) and, when that moved it, one more descent", s.name, boundScan[1], boundScan[len(boundScan)-1], s.unit)
		}
	}
	rf := &ReplayFit{
		Optimiser: fmt.Sprintf("Levenberg–Marquardt, forward-difference Jacobian (step %g on a log scale for efficiencies and the step overhead), mean squared log error of %d targets + %g × prior; %d iterations; %d restarts from the best minimum so far, each coefficient moved by ±%g%s: %s", lmStep, nTargets, prior, res.Iterations, restarts, lmKick, scanned, describeDescents(descents, res)),
		Source:    opts.Source, Free: free, Fixed: fixed, Evaluations: evals, Objective: res.F, Uncalibrated: f0, StartFrom: opts.StartFrom,
	}
	for i, r := range runs {
		set := "holdout"
		if r.Train {
			set = "train"
		}
		for j, t := range r.Targets {
			rf.Rows = append(rf.Rows, ErrorRow{
				Run: r.Run.Name, Label: r.Label, Target: t.Name(), Set: set, Observed: t.Observed,
				Uncalibrated: uncal[i][j], Calibrated: cal[i][j],
				UncalErr: relErr(uncal[i][j], t.Observed), CalErr: relErr(cal[i][j], t.Observed), Reported: t.Reported,
			})
		}
	}
	rf.Saturation = saturationOf(satRuns, opts.SaturationTTFT)
	dep := train[0].Deployment
	cm := &CostModel{
		Version: CostModelVersion, Form: model.FormRoofline, Hardware: dep.Hardware.Name, Model: dep.LLM.Name, TP: dep.TP,
		Coefficients: map[string]Coefficient{}, Replay: rf,
	}
	for _, name := range ReplayCoefficients {
		v := best[name]
		if !(v > 0) {
			continue
		}
		from := replayFitFrom
		switch {
		case slices.Contains(free, name):
		case name == CoefAttentionMFU && tieAttention:
			from = tiedToMFUFrom
		case slices.Contains(fixedNames(opts.Fixed), name):
			from = "fixed"
		case opts.Start != nil && opts.Start[name] > 0:
			from = "held at " + opts.StartFrom + "'s value (start)"
		default:
			continue // a default, not written: replay keeps its own
		}
		cm.Coefficients[name] = Coefficient{Value: v, Unit: coefUnits[name], From: from}
	}
	for i, s := range freeSpecs {
		if s.fraction && res.X[i] >= p.upper[i] {
			warnings = append(warnings, fmt.Sprintf("%s is held at the datasheet peak (1): the runs are as fast as the roofline allows at full efficiency or faster, so something is mispriced (hardware figures, model shape, parallelism, or a cost the step model lacks)", s.name))
		}
	}
	// What the runs leave out and the start gives is not at its default.
	for i, w := range warnings {
		name, _, _ := strings.Cut(w, " ")
		if v, ok := opts.Start[name]; ok && !slices.Contains(free, name) {
			warnings[i] = fmt.Sprintf("%s; held at %s's value, %.4g", w, opts.StartFrom, v)
		}
	}
	cm.Warnings = append(warnings, identifiability(train, freeSpecs, res.X, toCand, opts.Parallel)...)
	return cm, nil
}

func fixedNames(m map[string]float64) []string {
	var n []string
	for k := range m {
		n = append(n, k)
	}
	return n
}

// identifiability perturbs each fitted coefficient by 10 % (an additive
// one by one unit) and compares what that does to the training targets'
// log errors: a coefficient that moves no target by more than 0.5 % is
// not determined by the runs, and two whose effects point the same way
// (|cosine| > 0.98) cannot be told apart by them.
func identifiability(train []*ReplayRun, specs []coefSpec, x []float64, toCand func([]float64) candidate, parallel int) []string {
	cms := []*CostModel{toCand(x).costModel()}
	for i, s := range specs {
		y := slices.Clone(x)
		if s.log {
			y[i] += math.Log(1.1)
		} else {
			y[i] = max(y[i], 0) + 1
		}
		cms = append(cms, toCand(y).costModel())
	}
	all, err := evaluateMany(train, cms, parallel)
	if err != nil {
		return []string{"identifiability not checked: " + err.Error()}
	}
	base := all[0]
	effects := make([][]float64, len(specs))
	var warnings []string
	for i, s := range specs {
		sims := all[i+1]
		var v []float64
		moved := 0.0
		for r := range train {
			for t := range sims[r] {
				d := logErr(sims[r][t], 1) - logErr(base[r][t], 1)
				v = append(v, d)
				moved = max(moved, math.Abs(d))
			}
		}
		effects[i] = v
		if moved < 0.005 {
			warnings = append(warnings, fmt.Sprintf("%s is not determined by the training runs: changing it moves no target by 0.5 %% (its value is the prior's)", s.name))
		}
	}
	for i := range specs {
		for j := i + 1; j < len(specs); j++ {
			if c := cosine(effects[i], effects[j]); math.Abs(c) > 0.98 {
				warnings = append(warnings, fmt.Sprintf("the training runs cannot separate %s and %s (their effects on the targets have cosine %.3f): only a combination of them is fitted", specs[i].name, specs[j].name, c))
			}
		}
	}
	return warnings
}

func cosine(a, b []float64) float64 {
	var ab, aa, bb float64
	for i := range a {
		ab += a[i] * b[i]
		aa += a[i] * a[i]
		bb += b[i] * b[i]
	}
	if aa == 0 || bb == 0 {
		return 0
	}
	return ab / math.Sqrt(aa*bb)
}

// expertRuns reports whether some training run's model has routed
// experts, the only runs expert_mfu prices.
func expertRuns(runs []*ReplayRun) bool {
	for _, r := range runs {
		if r.Train && r.Deployment.LLM.IsMoE() {
			return true
		}
	}
	return false
}
