package replay

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/opaltrace/opaltrace/trace"
)

// Opal's workload stages (opal/workloads/workload.py at opal-sim@bc1e67e).
//
// An Opal config's "workload" holds "stages" (or, in old configs, one
// stage), each {"type", "workload_params"}, run one after another. The
// types, matched case-insensitively as Opal's loader does:
//
//   - UniformReqRate: a request every 1/request_rate s, the first at 0;
//     prompt and output lengths uniform over the integers
//     [prompt_size_min, prompt_size_max] and [output_tokens_min,
//     output_tokens_max] (numpy integers(min, max+1)). "jitter" is read by
//     Opal's config but not used by this type.
//   - ExponentialReqRate: the same, with gaps mean·(1−jitter) +
//     Exp(mean)·jitter, mean = 1/request_rate (jitter 1: Poisson, 0: fixed).
//   - trace: a Mooncake-style JSONL file (timestamp, input_length,
//     output_length, hash_ids), timestamps times multiplier_to_sec, each
//     hash id standing for chunk_size tokens; the file is relative to the
//     config file here (Opal resolves it against its working directory).
//
// A synthetic stage stops after total_requests (when > 0) or at
// time_duration_sec (when > 0), whichever comes first; with neither it
// would run until the global simulation_time, which then bounds it
// (Opal's global clock also counts earlier stages; here each stage is a
// run of its own, starting at 0).
//
// Shared prefix. Opal reads default_prefix_length but its prompts are the
// token ids 0…n−1, so every prompt is a prefix of every longer one —
// a cache hit rate no real workload has. What it means is done here: the
// first default_prefix_length tokens are the same in every request of
// every stage, the rest are the request's own. Prefixes are expressed as
// hash_ids over blocks of vllm_params.block_size tokens (16 if absent):
// a block is shared when it lies wholly inside the prefix.
//
// Length distributions beyond Opal's uniform ones: when a stage gives
// prompt_size_mean (and prompt_size_stdev, 0 if absent) — or
// output_tokens_mean / output_tokens_stdev — lengths are drawn from a
// normal distribution with that mean and deviation, rounded and clamped
// to [min, max]. This is an opaltrace extension; Opal ignores the keys.
//
// Randomness: this package's PCG, seeded per stage from the seed and the
// stage's index, not numpy's: the generated workload has the distribution
// of Opal's draws, not its draws.

// An OpalStage is one stage of an Opal workload config.
type OpalStage struct {
	Index int    // position in the stage list
	Type  string // "UniformReqRate", "ExponentialReqRate" or "trace", as Opal spells it (canonical case)

	// Synthetic stages.
	Rate          float64 // requests per second
	Jitter        float64 // ExponentialReqRate: 0 fixed gaps … 1 exponential gaps
	TotalRequests int     // stop after this many; ≤ 0: no count limit (trace: all rows)
	DurationSec   float64 // stop generating at this time; ≤ 0: no limit
	Prompt        OpalLength
	Output        OpalLength
	PrefixTokens  int64 // default_prefix_length: leading tokens every request shares

	// Trace stages.
	TraceFile       string  // resolved against the config file's directory
	ChunkSize       int64   // tokens per hash id (Opal's default 512)
	MultiplierToSec float64 // timestamp unit to seconds (Opal's default 1)
}

// An OpalLength is a length distribution: uniform over the integers
// [Min, Max], or, when HasMean, normal (Mean, Stdev) rounded and clamped
// to [Min, Max].
type OpalLength struct {
	Min, Max    int64
	HasMean     bool
	Mean, Stdev float64
}

// An OpalWorkload is the workload part of an Opal config.
type OpalWorkload struct {
	File           string // the config file
	Seed           uint64 // simulation.seed
	SimulationTime float64
	BlockSize      int64 // worker.vllm_params.block_size, or 16
	Stages         []OpalStage
}

// LoadOpalWorkload reads the workload stages of the Opal config at path.
func LoadOpalWorkload(path string) (*OpalWorkload, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseOpalWorkload(b, path)
}

// opalTypes are the stage types, by casefolded name.
var opalTypes = map[string]string{
	"uniformreqrate":     "UniformReqRate",
	"exponentialreqrate": "ExponentialReqRate",
	"trace":              "trace",
}

// ParseOpalWorkload parses the workload stages of an Opal config; file
// names it in errors and is the base of relative trace files.
func ParseOpalWorkload(data []byte, file string) (*OpalWorkload, error) {
	var cfg struct {
		Simulation struct {
			SimulationTime *float64 `json:"simulation_time"`
			Seed           *int64   `json:"seed"`
		} `json:"simulation"`
		Workload map[string]json.RawMessage `json:"workload"`
		Worker   struct {
			VLLM struct {
				BlockSize *int64 `json:"block_size"`
			} `json:"vllm_params"`
		} `json:"worker"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	bad := func(field, format string, a ...any) error {
		return fmt.Errorf("%s: %s: %s", file, field, fmt.Sprintf(format, a...))
	}
	w := &OpalWorkload{File: file, BlockSize: 16}
	if s := cfg.Simulation.Seed; s != nil {
		w.Seed = uint64(*s)
	}
	if t := cfg.Simulation.SimulationTime; t != nil {
		w.SimulationTime = *t
	}
	if b := cfg.Worker.VLLM.BlockSize; b != nil {
		if *b <= 0 {
			return nil, bad("worker.vllm_params.block_size", "not positive (%d)", *b)
		}
		w.BlockSize = *b
	}
	if cfg.Workload == nil {
		return nil, bad("workload", "missing")
	}
	var raw []json.RawMessage
	if st, ok := cfg.Workload["stages"]; ok {
		if err := json.Unmarshal(st, &raw); err != nil {
			return nil, bad("workload.stages", "not a list of stages")
		}
	} else {
		one, _ := json.Marshal(cfg.Workload) // old configs: the workload is the one stage
		raw = []json.RawMessage{one}
	}
	if len(raw) == 0 {
		return nil, bad("workload.stages", "empty")
	}
	for i, r := range raw {
		s, err := parseOpalStage(r, i, filepath.Dir(file))
		if err != nil {
			return nil, fmt.Errorf("%s: workload.stages[%d].%w", file, i, err)
		}
		if s.Type != "trace" && s.TotalRequests <= 0 && s.DurationSec <= 0 && w.SimulationTime <= 0 {
			return nil, bad(fmt.Sprintf("workload.stages[%d].workload_params", i),
				"neither total_requests, time_duration_sec nor simulation.simulation_time is positive: the stage never ends")
		}
		if n := s.expectedRequests(w.SimulationTime); n > MaxOpalStageRequests {
			return nil, bad(fmt.Sprintf("workload.stages[%d].workload_params", i),
				"about %.4g requests (total_requests, or request_rate × the stage's time), more than the %d a stage may generate: "+
					"its requests are held in memory (about 300 bytes each)", n, MaxOpalStageRequests)
		}
		w.Stages = append(w.Stages, s)
	}
	return w, nil
}

// parseOpalStage parses one stage; errors start with the field path under
// the stage.
func parseOpalStage(raw json.RawMessage, i int, dir string) (OpalStage, error) {
	var st struct {
		Type   string                     `json:"type"`
		Params map[string]json.RawMessage `json:"workload_params"`
	}
	s := OpalStage{Index: i}
	if err := json.Unmarshal(raw, &st); err != nil {
		return s, fmt.Errorf("type: stage is not an object with a type and workload_params")
	}
	typ, ok := opalTypes[strings.ToLower(st.Type)]
	if !ok {
		return s, fmt.Errorf("type: unknown stage type %q (want UniformReqRate, ExponentialReqRate or trace)", st.Type)
	}
	s.Type = typ
	if st.Params == nil {
		return s, fmt.Errorf("workload_params: missing")
	}
	p := opalParams{m: st.Params}
	if total := p.num("total_requests", false, -1); total > MaxOpalStageRequests {
		p.fail("total_requests", "%.4g requests, more than the %d a stage may generate (they are held in memory, about 300 bytes each)", total, MaxOpalStageRequests)
	} else {
		s.TotalRequests = int(total)
	}
	s.DurationSec = p.num("time_duration_sec", false, -1)
	if typ == "trace" {
		s.TraceFile = p.str("trace_file")
		if s.TraceFile != "" && !filepath.IsAbs(s.TraceFile) {
			s.TraceFile = filepath.Join(dir, s.TraceFile)
		}
		s.ChunkSize = int64(p.num("chunk_size", false, 512))
		s.MultiplierToSec = p.num("multiplier_to_sec", false, 1)
		switch {
		case p.err != nil:
		case s.ChunkSize < 1:
			p.fail("chunk_size", "not positive (%d)", s.ChunkSize)
		case !(s.MultiplierToSec >= 0):
			p.fail("multiplier_to_sec", "negative (%v)", s.MultiplierToSec)
		}
		return s, p.err
	}
	s.Rate = p.num("request_rate", true, 0)
	s.PrefixTokens = int64(p.num("default_prefix_length", false, 0))
	s.Jitter = p.num("jitter", typ == "ExponentialReqRate", 0)
	s.Prompt = p.length("prompt_size")
	s.Output = p.length("output_tokens")
	switch {
	case p.err != nil:
	case !(s.Rate > 0) || math.IsInf(s.Rate, 0):
		p.fail("request_rate", "not a positive finite rate (%v)", s.Rate)
	case !(s.Jitter >= 0 && s.Jitter <= 1):
		p.fail("jitter", "not in [0, 1] (%v)", s.Jitter)
	case s.PrefixTokens < 0:
		p.fail("default_prefix_length", "negative (%d)", s.PrefixTokens)
	}
	return s, p.err
}

// MaxOpalStageRequests bounds the requests a synthetic stage generates:
// they are all held in memory before the replay starts (about 300 bytes a
// request with its hash ids), so 20 million take some 6 GB. A workload of
// 10¹² requests is refused before anything is allocated.
const MaxOpalStageRequests = 20_000_000

// expectedRequests returns how many requests a synthetic stage will
// generate at most: total_requests, or its rate over its time (the stage's
// duration, or the simulation's), whichever is smaller; 0 for trace stages.
func (s OpalStage) expectedRequests(simTime float64) float64 {
	if s.Type == "trace" {
		return 0
	}
	n := math.Inf(1)
	if s.TotalRequests > 0 {
		n = float64(s.TotalRequests)
	}
	end := math.Inf(1)
	if s.DurationSec > 0 {
		end = s.DurationSec
	}
	if simTime > 0 {
		end = min(end, simTime)
	}
	return min(n, math.Ceil(s.Rate*end))
}

// opalParams reads workload_params, keeping the first error.
type opalParams struct {
	m   map[string]json.RawMessage
	err error
}

func (p *opalParams) fail(key, format string, a ...any) {
	if p.err == nil {
		p.err = fmt.Errorf("workload_params.%s: %s", key, fmt.Sprintf(format, a...))
	}
}

// num reads a number (Opal also accepts numeric strings, e.g. "a": "4").
func (p *opalParams) num(key string, required bool, def float64) float64 {
	raw, ok := p.m[key]
	if !ok {
		if required {
			p.fail(key, "missing")
		}
		return def
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		p.fail(key, "not JSON")
		return def
	}
	var f float64
	var err error
	switch x := v.(type) {
	case float64:
		f = x
	case string:
		f, err = strconv.ParseFloat(strings.TrimSpace(x), 64)
	default:
		err = fmt.Errorf("not a number")
	}
	if err != nil || math.IsNaN(f) {
		p.fail(key, "not a number (%s)", raw)
		return def
	}
	return f
}

func (p *opalParams) str(key string) string {
	raw, ok := p.m[key]
	var s string
	if !ok || json.Unmarshal(raw, &s) != nil || s == "" {
		p.fail(key, "missing or not a file name")
	}
	return s
}

// maxOpalLength bounds lengths: far beyond any model's context, small
// enough that a typo cannot ask for terabytes of hash ids.
const maxOpalLength = 1 << 24

// length reads <prefix>_min, _max and the optional _mean, _stdev.
func (p *opalParams) length(prefix string) OpalLength {
	var l OpalLength
	l.Min = int64(p.num(prefix+"_min", true, 0))
	l.Max = int64(p.num(prefix+"_max", true, 0))
	if _, ok := p.m[prefix+"_mean"]; ok {
		l.HasMean = true
		l.Mean = p.num(prefix+"_mean", true, 0)
		l.Stdev = p.num(prefix+"_stdev", false, 0)
	}
	switch {
	case p.err != nil:
	case l.Min < 1 && prefix == "prompt_size":
		p.fail(prefix+"_min", "below 1 (%d)", l.Min)
	case l.Min < 0:
		p.fail(prefix+"_min", "negative (%d)", l.Min)
	case l.Max > maxOpalLength:
		p.fail(prefix+"_max", "%d is beyond any context length (at most %d)", l.Max, maxOpalLength)
	case l.Max < l.Min:
		p.fail(prefix+"_max", "%d is below %s_min %d", l.Max, prefix, l.Min)
	case l.Stdev < 0:
		p.fail(prefix+"_stdev", "negative (%v)", l.Stdev)
	}
	return l
}

// draw draws one length.
func (l OpalLength) draw(rng *rand.Rand) int64 {
	if !l.HasMean {
		return l.Min + rng.Int64N(l.Max-l.Min+1)
	}
	v := math.Round(l.Mean + l.Stdev*rng.NormFloat64())
	return int64(min(max(v, float64(l.Min)), float64(l.Max)))
}

// FinishGapSec is how long the stage's generator sleeps after its last
// request before it reports the stage generated: a synthetic stage's
// request gap (for ExponentialReqRate its mean: Opal draws that gap from
// numpy's unseeded global generator), nothing for a trace stage.
func (s OpalStage) FinishGapSec() float64 {
	if s.Type == "trace" || !(s.Rate > 0) {
		return 0
	}
	return 1 / s.Rate
}

// StageName is the stage's label, as Opal names its output directory.
func (s OpalStage) StageName() string { return "stage_" + strconv.Itoa(s.Index) }

// Requests builds the stage's requests with seed: generated for a
// synthetic stage, read from its file for a trace stage. Arrivals count
// from the stage's start. run names the requests' Run. Errors name the
// config file and the stage, or the trace file and line.
func (w *OpalWorkload) Requests(s OpalStage, seed uint64, run string) (Requests, error) {
	if s.Type == "trace" {
		return readOpalTrace(w.File, s, run)
	}
	rng := rand.New(rand.NewPCG(seed, 0x6f70616c00+uint64(s.Index))) // "opal", stage
	end := math.Inf(1)
	if s.DurationSec > 0 {
		end = s.DurationSec
	}
	if w.SimulationTime > 0 {
		end = min(end, w.SimulationTime)
	}
	mean := 1 / s.Rate
	bs := w.BlockSize
	prefixBlocks := s.PrefixTokens / bs
	// Private hash ids lie above every shared one (< 2^50) and apart per
	// stage (stage k's from 2^50 + k·2^44 up).
	private := int64(1)<<50 + int64(s.Index)<<44
	var reqs Requests
	var t float64
	for i := 0; (s.TotalRequests <= 0 || i < s.TotalRequests) && t < end; i++ {
		in, out := s.Prompt.draw(rng), s.Output.draw(rng)
		nb := (in + bs - 1) / bs
		ids := make([]int64, nb)
		for j := range ids {
			if int64(j) < prefixBlocks && int64(j+1)*bs <= in {
				ids[j] = int64(j)
			} else {
				ids[j] = private
				private++
			}
		}
		reqs = append(reqs, &trace.Request{
			RequestID:    run + "/" + strconv.Itoa(i),
			Run:          run,
			Stage:        s.StageName(),
			Source:       "opal-synthetic",
			Status:       trace.StatusOK,
			InputTokens:  trace.Some(in),
			OutputTokens: trace.Some(out),
			Arrival:      trace.Some(trace.TimeFromSeconds(t)),
			BlockSize:    trace.Some(bs),
			HashIDs:      ids,
		})
		gap := mean
		if s.Type == "ExponentialReqRate" {
			gap = mean*(1-s.Jitter) + rng.ExpFloat64()*mean*s.Jitter
		}
		t += gap
	}
	if len(reqs) == 0 {
		return nil, fmt.Errorf("%s: workload.stages[%d]: no requests (the stage ends before its first)", w.File, s.Index)
	}
	return reqs, nil
}

// readOpalTrace reads a trace stage's JSONL file, at most TotalRequests
// rows when that is positive. Opal's timestamps are absolute simulation
// time (opal-notes.md Q5); here they count from the stage's start.
func readOpalTrace(cfgFile string, s OpalStage, run string) (Requests, error) {
	f, err := os.Open(s.TraceFile)
	if err != nil {
		return nil, fmt.Errorf("%s: workload.stages[%d].workload_params.trace_file: %w", cfgFile, s.Index, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<28)
	var reqs Requests
	for line := 1; sc.Scan() && (s.TotalRequests <= 0 || len(reqs) < s.TotalRequests); line++ {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var e struct {
			Timestamp *float64 `json:"timestamp"`
			In        *int64   `json:"input_length"`
			Out       *int64   `json:"output_length"`
			HashIDs   []int64  `json:"hash_ids"`
		}
		bad := func(field, what string) error {
			return fmt.Errorf("%s:%d: %s: %s", s.TraceFile, line, field, what)
		}
		if err := json.Unmarshal(b, &e); err != nil {
			return nil, bad("line", err.Error())
		}
		switch {
		case e.Timestamp == nil || !(*e.Timestamp >= 0):
			return nil, bad("timestamp", "missing or negative")
		case e.In == nil || *e.In < 1:
			return nil, bad("input_length", "missing or below 1")
		case e.Out == nil || *e.Out < 0:
			return nil, bad("output_length", "missing or negative")
		}
		r := &trace.Request{
			RequestID:    run + "/" + strconv.Itoa(len(reqs)),
			Run:          run,
			Stage:        s.StageName(),
			Source:       "opal-trace",
			Status:       trace.StatusOK,
			InputTokens:  trace.Some(*e.In),
			OutputTokens: trace.Some(*e.Out),
			Arrival:      trace.Some(trace.TimeFromSeconds(*e.Timestamp * s.MultiplierToSec)),
		}
		if len(e.HashIDs) > 0 {
			r.BlockSize, r.HashIDs = trace.Some(s.ChunkSize), e.HashIDs
		}
		reqs = append(reqs, r)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", s.TraceFile, err)
	}
	if len(reqs) == 0 {
		return nil, fmt.Errorf("%s: no requests", s.TraceFile)
	}
	return reqs, nil
}
