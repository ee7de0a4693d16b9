package replay

import (
	"cmp"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/opaltrace/opaltrace/model"
	"github.com/opaltrace/opaltrace/trace"
)

// A PlannerConfig sizes both pools of a disaggregated fleet as NVIDIA
// Dynamo's SLA planner does (its throughput-based planner as of its
// profile-interpolation versions: components/src/dynamo/planner/utils/
// planner_core.py, prefill_planner.py, decode_planner.py,
// perf_interpolation.py), in place of an HPA on each pool. Every
// AdjustmentIntervalSec it observes the interval as Dynamo's frontend
// records it (lib/llm/src/http/service/metrics.rs), each a histogram's or
// counter's increase over the interval: the requests that ended in it
// (dynamo_frontend_requests_total, completed or not), their mean
// duration and output length (observed as a request's stream ends), the
// mean TTFT and input length of the requests whose first token came in
// it (observed at a request's first chunk: TTFT from the request's
// arrival at the frontend), and the mean ITL of the tokens after the first sent in it
// (a chunk's gap since the one before, over its tokens, once per token;
// streamedObs) — so a request that outlasts an interval is seen in
// several. When all five are there (Dynamo skips an interval in which
// any is NaN, nothing observed: no first token, no later token or no
// request ended):
//
//   - corrects its performance model (unless NoCorrection): the prefill
//     factor is the observed TTFT over the profiled TTFT of one request
//     of the observed input length; the decode factor the observed ITL
//     over the profiled ITL at the decode workers' concurrency by
//     Little's law (requests / decode workers × duration / interval) and
//     a context of ISL + OSL/2;
//   - predicts the next interval's requests, ISL and OSL (Predictor:
//     constant, the last interval's; or kalman, a Kalman filter's,
//     plannerpredict.go), each predictor having taken every interval's
//     observation, an interval with nothing observed too (Dynamo's
//     observe_traffic_stats feeds them before it checks the metrics);
//   - asks for ⌈requests · ISL / interval · min(1, prefill factor) /
//     the profiled prefill throughput at ISL⌉ prefill workers, and
//     ⌈requests · OSL / interval / the decode throughput⌉ decode workers,
//     the decode throughput the profile's best at a context of ISL +
//     OSL/2 whose ITL is within the ITL target over the decode factor
//     (requests, ISL and OSL the predicted ones; the factors' ISL, OSL
//     and context the observed ones); each at least MinEndpoint;
//   - fits them in MaxGPUBudget GPUs as Dynamo does
//     (_apply_global_gpu_budget: scaled down in proportion, the prefill
//     pool's share floored and capped so that the decode pool keeps
//     MinEndpoint, the decode pool the rest), and sets both pools to
//     them at once: new workers ready after their start-up, drained
//     ones stopped as an HPA's are.
//
// Dynamo profiles the deployment before it runs (profile_sla: TTFT of
// one request per ISL, ITL and throughput per context and concurrency)
// and interpolates; the replay's profile is its own step model, priced
// exactly: one request's prefill in chunks of the token budget, and a
// decode step of n requests at the context, n up to the KV capacity and
// the running limit. Where no concurrency meets the ITL target the
// throughput is one request's (Dynamo's grid takes its lowest KV usage).
// Requests that end without completing (timed out, refused) count as
// the frontend counts them, requests_total being of every status: their
// duration and their output so far, 0 tokens too (ended). Not modelled:
// the ARIMA and Prophet predictors (Dynamo's default is ARIMA). Dynamo's
// load-based scaling (its other optimization targets) is the policy
// dynamo: plannerload.go.
type PlannerConfig struct {
	// Policy is "dynamo_sla" (the SLA planner), "dynamo" (the load-based
	// scaling of Dynamo's other optimization targets, plannerload.go)
	// or "" (off).
	Policy string `yaml:"policy,omitempty"`
	// AdjustmentIntervalSec is --adjustment-interval (default 180 s)
	// for dynamo_sla, load_adjustment_interval_seconds (default 5 s)
	// for dynamo.
	AdjustmentIntervalSec float64 `yaml:"adjustment_interval_s,omitempty"`
	// OptimizationTarget is the dynamo policy's optimization_target:
	// throughput (the default), latency or load (plannerload.go).
	OptimizationTarget string `yaml:"optimization_target,omitempty"`
	// The load target's thresholds (Dynamo's prefill_scale_up_queue_tokens,
	// prefill_scale_down_queue_tokens: a prefill engine's queued prompt
	// tokens; decode_scale_up_kv_rate, decode_scale_down_kv_rate: a
	// decode engine's KV demand in percent of its capacity), each
	// needed with optimization_target load and refused otherwise.
	PrefillScaleUpQueueTokens   *int64   `yaml:"prefill_scale_up_queue_tokens,omitempty"`
	PrefillScaleDownQueueTokens *int64   `yaml:"prefill_scale_down_queue_tokens,omitempty"`
	DecodeScaleUpKVRate         *float64 `yaml:"decode_scale_up_kv_rate,omitempty"`
	DecodeScaleDownKVRate       *float64 `yaml:"decode_scale_down_kv_rate,omitempty"`
	// TTFTSec and ITLSec are the targets (--ttft and --itl, there in
	// ms: default 0.5 s and 0.05 s). The TTFT target enters only
	// through the prefill factor, as in Dynamo.
	TTFTSec float64 `yaml:"ttft_s,omitempty"`
	ITLSec  float64 `yaml:"itl_s,omitempty"`
	// Predictor is the load predictor (--load-predictor): constant (the
	// last interval's values; the default here) or kalman.
	Predictor string `yaml:"predictor,omitempty"`
	// PredictorLog1p runs the Kalman filter on log1p of the values
	// (--load-predictor-log1p).
	PredictorLog1p bool `yaml:"predictor_log1p,omitempty"`
	// KalmanQLevel, KalmanQTrend and KalmanR are the Kalman filter's
	// process noise of the level and of the trend and its measurement
	// noise (--kalman-q-level 1, --kalman-q-trend 0.1, --kalman-r 10).
	KalmanQLevel float64 `yaml:"kalman_q_level,omitempty"`
	KalmanQTrend float64 `yaml:"kalman_q_trend,omitempty"`
	KalmanR      float64 `yaml:"kalman_r,omitempty"`
	// MinEndpoint is the least workers of each pool (default 1), and
	// MaxGPUBudget the most GPUs of both (default 8, Dynamo's).
	MinEndpoint  int `yaml:"min_endpoint,omitempty"`
	MaxGPUBudget int `yaml:"max_gpu_budget,omitempty"`
	// GPUsPerWorker is the GPUs of one worker, prefill or decode
	// (Dynamo's prefill_engine_num_gpu, decode_engine_num_gpu; default
	// 1), and PrefillGPUsPerWorker a prefill worker's when the prefill
	// pool is a deployment of its own (DisaggregationConfig.PrefillTP,
	// PrefillHardware: Dynamo's prefill_engine_num_gpu apart; default
	// GPUsPerWorker, which is then the decode workers').
	GPUsPerWorker        int `yaml:"gpus_per_worker,omitempty"`
	PrefillGPUsPerWorker int `yaml:"prefill_gpus_per_worker,omitempty"`
	// NoCorrection turns the correction factors off (--no-correction).
	NoCorrection bool `yaml:"no_correction,omitempty"`
	// Start-up time of a new worker, as AutoscaleConfig's.
	ContainerStartSec float64 `yaml:"container_start_s,omitempty"`
	WeightsGB         float64 `yaml:"weights_gb,omitempty"`
	StorageGBps       float64 `yaml:"storage_gbps,omitempty"`
	// ReplicaWorkers is how many workers an engine is (default 1): with
	// data parallelism a server of that many ranks, which the planner
	// starts, counts and drains together, as an HPA's replica
	// (AutoscaleConfig.ReplicaWorkers; deploy sets it from dp or
	// enable_dp_attention). Engines are then servers: min_endpoint and
	// the workers the planner asks each pool for count them, and the
	// pools start with their workers / ReplicaWorkers of them.
	// gpus_per_worker stays a rank's, so that an engine is
	// ReplicaWorkers · GPUsPerWorker GPUs (Dynamo's
	// prefill_engine_num_gpu and decode_engine_num_gpu, which the budget
	// counts), and an engine's profiled throughput is ReplicaWorkers
	// times a rank's: Dynamo's profiler sends an engine of
	// attention_dp_size ranks that many requests at once, one a rank,
	// and counts isl / TTFT · attention_dp_size over its GPUs
	// (profile_prefill), and its decode throughput per GPU at a
	// concurrency spread over the ranks.
	ReplicaWorkers int `yaml:"-"`
	// PrefillReplicaWorkers is ReplicaWorkers for the prefill pool's
	// engines when they are servers of other rank counts than the decode
	// pool's (SGLang's DP attention with a prefill_tp of its own: a
	// prefill server's ranks are its prefill_tp); 0: ReplicaWorkers.
	// Deploy sets it.
	PrefillReplicaWorkers int `yaml:"-"`
}

// Planner policies (PlannerConfig.Policy): Dynamo's SLA planner, and
// its load-based scaling (the optimization targets throughput, latency
// and load).
const (
	PlannerDynamoSLA  = "dynamo_sla"
	PlannerDynamoLoad = "dynamo"
)

func (p PlannerConfig) on() bool { return p.Policy != "" }

func (p PlannerConfig) withDefaults() PlannerConfig {
	if !p.on() {
		return p
	}
	if p.Policy == PlannerDynamoLoad {
		// No SLA settings: the load-based scaling takes none
		// (validateLoad).
		if p.AdjustmentIntervalSec == 0 {
			p.AdjustmentIntervalSec = 5
		}
		if p.OptimizationTarget == "" {
			p.OptimizationTarget = TargetThroughput
		}
		return p.commonDefaults()
	}
	if p.AdjustmentIntervalSec == 0 {
		p.AdjustmentIntervalSec = 180
	}
	if p.TTFTSec == 0 {
		p.TTFTSec = 0.5
	}
	if p.ITLSec == 0 {
		p.ITLSec = 0.05
	}
	if p.Predictor == "" {
		p.Predictor = PredictorConstant
	}
	if p.KalmanQLevel == 0 {
		p.KalmanQLevel = 1
	}
	if p.KalmanQTrend == 0 {
		p.KalmanQTrend = 0.1
	}
	if p.KalmanR == 0 {
		p.KalmanR = 10
	}
	return p.commonDefaults()
}

// commonDefaults sets the defaults of both policies: the least workers of
// a pool, the GPU budget, the GPUs of a worker.
func (p PlannerConfig) commonDefaults() PlannerConfig {
	if p.MinEndpoint == 0 {
		p.MinEndpoint = 1
	}
	if p.MaxGPUBudget == 0 {
		p.MaxGPUBudget = 8
	}
	if p.GPUsPerWorker == 0 {
		p.GPUsPerWorker = 1
	}
	if p.PrefillGPUsPerWorker == 0 {
		p.PrefillGPUsPerWorker = p.GPUsPerWorker
	}
	return p
}

// validate reports what p cannot be under key ("disaggregation.planner.",
// or "planner." for an aggregated fleet: agg).
func (p PlannerConfig) validate(key string, agg bool, bad func(field, format string, args ...any)) {
	if !p.on() {
		return
	}
	p = p.withDefaults()
	switch p.Policy {
	case PlannerDynamoLoad:
		p.validateLoad(key, agg, bad)
		p.validateCommon(key, agg, bad)
		return
	case PlannerDynamoSLA:
		if agg {
			bad(key+"policy", "%s on an aggregated fleet: not modelled yet (Dynamo's SLA planner sizes the pools of a disaggregated fleet here: disaggregation.planner; policy %s scales an aggregated one)", PlannerDynamoSLA, PlannerDynamoLoad)
			return
		}
		if p.OptimizationTarget != "" || p.PrefillScaleUpQueueTokens != nil || p.PrefillScaleDownQueueTokens != nil ||
			p.DecodeScaleUpKVRate != nil || p.DecodeScaleDownKVRate != nil {
			bad(key+"optimization_target", "the load-based scaling's settings need policy %s (%s is the SLA planner)", PlannerDynamoLoad, PlannerDynamoSLA)
		}
	default:
		bad(key+"policy", "%q is not %s or %s", p.Policy, PlannerDynamoSLA, PlannerDynamoLoad)
	}
	switch p.Predictor {
	case PredictorConstant, PredictorKalman:
	case "arima", "prophet":
		bad(key+"predictor", "%q is not modelled (constant and kalman are; Dynamo's arima and prophet are not)", p.Predictor)
	default:
		bad(key+"predictor", "%q is not one of %s, %s", p.Predictor, PredictorConstant, PredictorKalman)
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"kalman_q_level", p.KalmanQLevel}, {"kalman_q_trend", p.KalmanQTrend}, {"kalman_r", p.KalmanR}} {
		if !(f.v > 0) || math.IsInf(f.v, 0) {
			bad(key+f.name, "%v is not a positive number", f.v)
		}
	}
	seconds := func(field string, v, most float64) {
		if !(v > 0) || v > most {
			bad(key+field, "%v is not a number of seconds in (0, %g]", v, most)
		}
	}
	seconds("ttft_s", p.TTFTSec, 3600)
	seconds("itl_s", p.ITLSec, 3600)
	p.validateCommon(key, agg, bad)
}

// validateCommon reports what neither policy takes in p (with its
// defaults) under key: the interval, the pools' least workers, GPUs and
// budget, the start-up; of an aggregated fleet's one pool (agg).
func (p PlannerConfig) validateCommon(key string, agg bool, bad func(field, format string, args ...any)) {
	if v := p.AdjustmentIntervalSec; !(v > 0) || v > 86400 {
		bad(key+"adjustment_interval_s", "%v is not a number of seconds in (0, %g]", v, 86400.0)
	}
	if p.MinEndpoint < 1 {
		bad(key+"min_endpoint", "%d: each pool keeps one worker at least", p.MinEndpoint)
	}
	if p.GPUsPerWorker < 1 {
		bad(key+"gpus_per_worker", "%d is not a number of GPUs", p.GPUsPerWorker)
	}
	switch {
	case agg && p.PrefillGPUsPerWorker != p.GPUsPerWorker:
		bad(key+"prefill_gpus_per_worker", "an aggregated fleet has one pool, of gpus_per_worker GPUs a worker")
	case p.PrefillGPUsPerWorker < 1:
		bad(key+"prefill_gpus_per_worker", "%d is not a number of GPUs", p.PrefillGPUsPerWorker)
	}
	// Dynamo's negative budget (none) would leave the fleet unbounded;
	// a replay's slots need a bound.
	least, pools := p.MinEndpoint*(p.engineGPUs(true)+p.engineGPUs(false)), "of each pool"
	if agg {
		least, pools = p.MinEndpoint*p.engineGPUs(false), "of the fleet"
	}
	if p.MaxGPUBudget < least || p.MaxGPUBudget > 4096 {
		bad(key+"max_gpu_budget", "%d GPUs: want room for min_endpoint workers %s (%d GPUs) and at most 4096", p.MaxGPUBudget, pools, least)
	}
	validateStartup(key, p.ContainerStartSec, p.WeightsGB, p.StorageGBps, bad)
}

// most returns the most engines (workers, or servers of ReplicaWorkers
// ranks) of the prefill pool (prefill) or the decode pool the budget
// allows, the other pool keeping MinEndpoint.
func (p PlannerConfig) most(prefill bool) int {
	return (p.MaxGPUBudget - p.MinEndpoint*p.engineGPUs(!prefill)) / p.engineGPUs(prefill)
}

// replicaWorkers is ReplicaWorkers, 1 if unset: the workers of an
// aggregated fleet's engine, or of a decode engine.
func (p PlannerConfig) replicaWorkers() int { return max(p.ReplicaWorkers, 1) }

// poolReplicaWorkers is the workers of one engine of the prefill pool
// (prefill: PrefillReplicaWorkers, ReplicaWorkers when unset) or the
// decode pool.
func (p PlannerConfig) poolReplicaWorkers(prefill bool) int {
	if prefill && p.PrefillReplicaWorkers > 0 {
		return p.PrefillReplicaWorkers
	}
	return p.replicaWorkers()
}

// engineGPUs is the GPUs of one engine of the prefill pool (prefill) or
// the decode pool: its ranks'.
func (p PlannerConfig) engineGPUs(prefill bool) int {
	return p.workerGPUs(prefill) * p.poolReplicaWorkers(prefill)
}

// workerGPUs is the GPUs of one worker of the prefill pool (prefill) or
// the decode pool: PrefillGPUsPerWorker (GPUsPerWorker when unset) or
// GPUsPerWorker.
func (p PlannerConfig) workerGPUs(prefill bool) int {
	if prefill {
		return cmp.Or(p.PrefillGPUsPerWorker, p.GPUsPerWorker)
	}
	return p.GPUsPerWorker
}

// pool returns the AutoscaleConfig that stands for the planner in the
// autoscaler's pool of prefill workers (prefill) or decode workers: its
// start-up, bounds and GPUs.
func (p PlannerConfig) pool(prefill bool) AutoscaleConfig {
	return AutoscaleConfig{MinReplicas: ptrInt(p.MinEndpoint), MaxReplicas: p.most(prefill), ContainerStartSec: p.ContainerStartSec,
		WeightsGB: p.WeightsGB, StorageGBps: p.StorageGBps, GPUsPerWorker: p.workerGPUs(prefill), ReplicaWorkers: p.poolReplicaWorkers(prefill)}
}

// A PlannerAdjustment is one adjustment of the planner: what it observed
// over the interval before At, its correction factors, what its
// predictors predicted for the next interval, what its profile gave (one
// request's prefill at the predicted ISL, and a decode worker's best
// output tokens a second within the corrected ITL target, at a context of
// ISL + OSL/2, predicted), and the workers it asked each pool for
// (Skipped: nothing completed, no change; no prediction then).
type PlannerAdjustment struct {
	At                           trace.Time
	Requests                     int64
	TTFTSec, ITLSec, DurationSec float64
	ISL, OSL                     float64
	PrefillFactor, DecodeFactor  float64
	// The predicted requests, ISL and OSL of the next interval.
	NextRequests, NextISL, NextOSL float64
	ProfilePrefillSec              float64
	ProfileDecodeTokensPerSec      float64
	Prefill, Decode                int
	Skipped                        bool
	// PrefillLoad and DecodeLoad are, under the dynamo policy
	// (plannerload.go), the largest load of a ready engine of each
	// pool (NaN when blocked: Skipped, a pool still scaling); the
	// fields above but At, Prefill and Decode are the SLA planner's.
	PrefillLoad, DecodeLoad float64
}

// A planner is the replay's Dynamo SLA planner: the interval's
// observations, the correction factors, and the profile's prices.
type planner struct {
	cfg      PlannerConfig
	interval time.Duration
	// The interval's completions: their number and sums (the
	// frontend's requests_total, request duration and OSL, observed
	// as a request ends).
	n             int64
	duration, osl float64
	// streamed holds what the frontend observes as tokens stream, by
	// the adjustment whose interval holds their time: streamed[i] is
	// adjustment next+i's (the next-th is due at next·interval).
	streamed []streamedObs
	next     int64
	pcf, dcf float64
	// The predictors of the requests, ISL and OSL.
	predReqs, predISL, predOSL loadPredictor
	chunk, kvTokens            int64
	maxSeqs                    int
	// cost prices the decode profile, prefillCost the prefill
	// profile: the prefill pool's step model (its own deployment's,
	// Options.Prefill, or the cluster's).
	cost, prefillCost model.StepModel
	batch             model.Batch
	log               []PlannerAdjustment
	// loads is the dynamo policy's scratch: a pool's engines' loads.
	loads []float64
}

func newPlanner(cfg PlannerConfig, prefillCost, cost model.StepModel, chunk, kvTokens int64, maxSeqs int) *planner {
	p := &planner{cfg: cfg, interval: trace.DurationSeconds(cfg.AdjustmentIntervalSec), pcf: 1, dcf: 1, next: 1,
		chunk: chunk, kvTokens: kvTokens, maxSeqs: maxSeqs, cost: cost, prefillCost: prefillCost}
	predictor := func() loadPredictor {
		if cfg.Predictor == PredictorKalman {
			return newKalmanPredictor(cfg)
		}
		return &constantPredictor{}
	}
	p.predReqs, p.predISL, p.predOSL = predictor(), predictor(), predictor()
	return p
}

// completed observes a request that completed: its duration at the
// frontend (from its arrival there to its last chunk: the client's E2E
// less its latency both ways) and its output length, and it counts (the
// frontend's request duration, OSL and requests_total, observed as the
// request's stream ends).
func (p *planner) completed(o *trace.Request) {
	p.ended(o.DoneAtRouter.V.Sub(o.RouterArrival.V).Seconds(), o.OutputTokens.V)
}

// ended observes a request that ended at the frontend, completed or not
// (the client gave up, or it was refused), as the frontend's guards do
// whatever the status: it counts, its duration (from its arrival to its
// end there) and its output so far.
func (p *planner) ended(duration float64, out int64) {
	p.n++
	p.duration += duration
	p.osl += float64(out)
}

// A streamedObs is what the frontend observes of the requests as their
// tokens stream, over one adjustment's interval: their first tokens (the
// TTFT and ISL histograms, observed at a request's first chunk) and the
// tokens of their later chunks (the ITL histogram: a chunk's gap over
// its tokens, once per token, so that a chunk adds its gap to the sum).
//
// Note: Dynamo's frontend (lib/llm/src/http/service/metrics.rs,
// ResponseMetricCollector, 0.4.0 to 0.6.0 and since) observes these as
// the response streams, not when the request ends: a request that runs
// for several intervals adds its TTFT to the first and its ITL to each.
type streamedObs struct {
	first     int64
	ttft, isl float64
	itlSum    float64
	itlTokens int64
}

// at returns the observations of the interval that holds time t: the
// adjustment due next if t is not past its time, else the one whose
// interval holds t (a worker's steps are built ahead of the clock, up to
// its next event, and their chunks observed then: steadySteps).
func (p *planner) at(t trace.Time) *streamedObs {
	k := p.next
	if d := p.interval; t > trace.Time(0).Add(time.Duration(k)*d) {
		k = (int64(t) + int64(d) - 1) / int64(d) // ⌈t / interval⌉
	}
	i := int(k - p.next)
	for len(p.streamed) <= i {
		p.streamed = append(p.streamed, streamedObs{})
	}
	return &p.streamed[i]
}

// firstToken observes r's first chunk at t: its TTFT at the frontend
// (from its arrival there) and its input length.
func (p *planner) firstToken(t trace.Time, r *reqState) {
	o := p.at(t)
	o.first++
	o.ttft += t.Sub(r.arrival).Seconds()
	o.isl += float64(r.prompt)
}

// laterChunk observes a chunk after the first at t: its gap since the
// chunk before and its tokens.
func (p *planner) laterChunk(t trace.Time, gap float64, tokens int64) {
	o := p.at(t)
	o.itlSum += gap
	o.itlTokens += tokens
}

// take returns the streamed observations of the adjustment due now, and
// makes the next one due.
func (p *planner) take() streamedObs {
	var o streamedObs
	if len(p.streamed) > 0 {
		o = p.streamed[0]
		n := copy(p.streamed, p.streamed[1:])
		p.streamed = p.streamed[:n]
	}
	p.next++
	return o
}

// prefillSec is the profile's TTFT of one request of isl prompt tokens:
// its prefill alone, in chunks of the token budget.
func (p *planner) prefillSec(isl float64) float64 {
	n := max(int64(math.Round(isl)), 1)
	chunk := p.chunk
	if chunk <= 0 {
		chunk = n // no token budget: the prompt in one step
	}
	var d time.Duration
	for done := int64(0); done < n; {
		k := min(chunk, n-done)
		p.batch = model.Batch{Prefill: append(p.batch.Prefill[:0], model.PrefillChunk{Tokens: k, Context: done})}
		d += p.prefillCost.StepTime(&p.batch)
		done += k
	}
	return d.Seconds()
}

// itlAt is the profile's ITL of n requests decoding together at a context
// of ctx tokens.
func (p *planner) itlAt(n int, ctx int64) float64 {
	dec := p.batch.Decode[:0]
	for range n {
		dec = append(dec, ctx)
	}
	p.batch = model.Batch{Prefill: p.batch.Prefill[:0], Decode: dec}
	return p.cost.StepTime(&p.batch).Seconds()
}

// most is the most requests that decode together at a context of ctx:
// within the KV capacity and the running limit.
func (p *planner) most(ctx int64) int {
	return max(1, min(int(p.kvTokens/max(ctx, 1)), p.maxSeqs))
}

// itlAtConcurrency is the profile's ITL at a fractional concurrency c
// (Little's law), linear between the whole ones around it, within [1,
// most].
func (p *planner) itlAtConcurrency(c float64, ctx int64) float64 {
	c = min(max(c, 1), float64(p.most(ctx)))
	lo := int(c)
	a := p.itlAt(lo, ctx)
	if float64(lo) == c {
		return a
	}
	return a + (c-float64(lo))*(p.itlAt(lo+1, ctx)-a)
}

// decodeThroughput is the profile's best output tokens per second of one
// worker at a context of ctx whose ITL is within target: the most
// requests that meet it (one if none does).
func (p *planner) decodeThroughput(target float64, ctx int64) float64 {
	m := p.most(ctx)
	n := sort.Search(m, func(k int) bool { return p.itlAt(k+1, ctx) > target }) // requests 1…n meet it
	n = max(n, 1)
	return float64(n) / p.itlAt(n, ctx)
}

// adjust is the planner's adjustment at now, with decode the decode
// pool's ready workers (ranks, with ReplicaWorkers: the concurrency by
// Little's law is then a rank's, an engine's over its ranks, as Dynamo's
// decode profile spreads it): it returns the engines each pool is to
// have, and false when nothing completed in the interval (no change).
func (p *planner) adjust(now trace.Time, decode int) (int, int, bool) {
	adj := PlannerAdjustment{At: now, Requests: p.n, PrefillLoad: math.NaN(), DecodeLoad: math.NaN()}
	defer func() {
		p.n, p.duration, p.osl = 0, 0, 0
		adj.PrefillFactor, adj.DecodeFactor = p.pcf, p.dcf
		p.log = append(p.log, adj)
	}()
	s := p.take()
	n, first := float64(p.n), float64(s.first)
	// Each NaN when nothing was observed (Prometheus's 0/0).
	ttft, isl, itl := s.ttft/first, s.isl/first, s.itlSum/float64(s.itlTokens)
	duration, osl := p.duration/n, p.osl/n
	adj.TTFTSec, adj.ITLSec, adj.DurationSec, adj.ISL, adj.OSL = ttft, itl, duration, isl, osl
	// The predictors take the interval's observations whatever they
	// are (observe_traffic_stats), before the planner checks them.
	p.predReqs.add(n)
	p.predISL.add(isl)
	p.predOSL.add(osl)
	if math.IsNaN(ttft) || math.IsNaN(itl) || math.IsNaN(isl) || math.IsNaN(osl) {
		// Dynamo skips an interval in which a metric has nothing
		// (make_adjustments: None or NaN in TTFT, ITL, ISL or OSL):
		// no first token, no later chunk, or no request ended.
		adj.Skipped = true
		return 0, 0, false
	}
	interval := p.interval.Seconds()
	if !p.cfg.NoCorrection {
		p.pcf = ttft / p.prefillSec(isl)
		if decode > 0 {
			c := n / float64(decode) * duration / interval
			p.dcf = itl / p.itlAtConcurrency(c, contextOf(isl, osl))
		}
	}
	nextN, nextISL, nextOSL := p.predReqs.next(), p.predISL.next(), p.predOSL.next()
	adj.NextRequests, adj.NextISL, adj.NextOSL = nextN, nextISL, nextOSL
	prefillDemand := nextN * nextISL / interval * min(1, p.pcf)
	// The profile at a predicted ISL of a token at least: a filter's
	// prediction can fall to 0 or below, where Dynamo's interpolation
	// takes its profile's first point (a demand of 0 or less asks for
	// min_endpoint workers either way).
	profileISL := max(nextISL, 1)
	adj.ProfilePrefillSec = p.prefillSec(profileISL)
	// An engine of k ranks takes k requests at once (ReplicaWorkers; a
	// prefill engine's and a decode engine's may differ).
	kp, kd := float64(p.cfg.poolReplicaWorkers(true)), float64(p.cfg.poolReplicaWorkers(false))
	prefill := p.cfg.MinEndpoint
	if prefillDemand > 0 {
		prefill = max(int(math.Ceil(prefillDemand/(kp*profileISL/adj.ProfilePrefillSec))), prefill)
	}
	target := p.cfg.ITLSec
	if p.dcf > 0 {
		target /= p.dcf
	}
	adj.ProfileDecodeTokensPerSec = p.decodeThroughput(target, contextOf(nextISL, nextOSL))
	dec := max(int(math.Ceil(nextN*nextOSL/interval/(kd*adj.ProfileDecodeTokensPerSec))), p.cfg.MinEndpoint)
	prefill, dec = p.budget(prefill, dec)
	adj.Prefill, adj.Decode = prefill, dec
	return prefill, dec, true
}

// contextOf is the decode profile's context for requests of isl prompt
// and osl output tokens: ISL + OSL/2, rounded, a token at least.
func contextOf(isl, osl float64) int64 {
	return max(int64(math.Round(isl+osl/2)), 1)
}

// budget fits prefill and decode engines in the GPU budget as Dynamo's
// _apply_global_gpu_budget does, each pool's engines of their own GPUs
// (prefill_engine_num_gpu, decode_engine_num_gpu).
func (p *planner) budget(prefill, decode int) (int, int) {
	gp, gd, b, least := p.cfg.engineGPUs(true), p.cfg.engineGPUs(false), p.cfg.MaxGPUBudget, p.cfg.MinEndpoint
	total := prefill*gp + decode*gd
	if total <= b {
		return prefill, decode
	}
	s := float64(b) / float64(total)
	most := (b - least*gd) / gp
	prefill = max(least, min(most, int(math.Floor(float64(prefill)*s))))
	decode = max(least, (b-prefill*gp)/gd)
	return prefill, decode
}

// plannerLog returns the adjustments so far, for Stats.
func (p *planner) plannerLog() []PlannerAdjustment { return slices.Clone(p.log) }
