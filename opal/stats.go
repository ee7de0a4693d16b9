package opal

import (
	"bufio"
	"cmp"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/opaltrace/opaltrace/replay"
	"github.com/opaltrace/opaltrace/trace"
)

// ReplayStage is the stage of Opal's outputs for an opaltrace replay's
// records of one run on workers workers: completion order and the
// per-second completions from their times at the router, the stage from
// 0 to the last completion.
func ReplayStage(recs []*trace.Request, workers int) *replay.OpalRun {
	s := &replay.OpalRun{Queued: len(recs)}
	for _, r := range recs {
		if r.Status == trace.StatusOK {
			s.Records = append(s.Records, r)
		}
	}
	done := func(r *trace.Request) float64 { return r.DoneAtRouter.V.Seconds() }
	slices.SortStableFunc(s.Records, func(a, b *trace.Request) int { return cmp.Compare(done(a), done(b)) })
	for _, r := range s.Records {
		s.End = max(s.End, done(r))
	}
	n := int(math.Ceil(s.End))
	s.PerSecondFinished = make([]int, n)
	s.PerSecondWorkers = make([]int, n)
	for i := range s.PerSecondWorkers {
		s.PerSecondWorkers[i] = workers
	}
	for _, r := range s.Records {
		i := max(int(math.Ceil(done(r)))-1, 0)
		s.PerSecondFinished[min(i, n-1)]++
	}
	return s
}

// latencyBins are Opal's histogram bins, in ms: 1 s doubling up to 10⁴ s.
func latencyBins() []int {
	var b []int
	for v := 1000; v < 10_000_000; v *= 2 {
		b = append(b, v)
	}
	return b
}

// WriteStats writes s as Opal's opal_stats.json: its keys in its order,
// lists on one line, numbers as Python prints them, times in seconds.
// With q7 the latencies histogram keeps Opal's bug (its bins are in ms,
// the latencies it compares with them in s, so every request lands in
// bin 0: opal-notes.md Q7); without, each latency goes to the bin of its
// value in ms.
func WriteStats(out io.Writer, s *replay.OpalRun, q7 bool) error {
	bins := latencyBins()
	hist := make([]float64, len(bins))
	var lat, queue, kvc, gpu, ttft []float64
	var total float64
	decode := make([][]float64, 0, len(s.Records))
	tokens := make([][2]int64, 0, len(s.Records))
	for i, r := range s.Records {
		e2e := r.E2ESec.V
		lat = append(lat, e2e)
		total += e2e
		v := e2e
		if !q7 {
			v *= 1000
		}
		b := 0
		for b < len(bins)-1 && v > float64(bins[b]) {
			b++
		}
		hist[b]++
		queue = append(queue, r.QueueSec.V)
		kvc = append(kvc, r.KVFetchSec.V)
		if s.GPUTime != nil {
			gpu = append(gpu, s.GPUTime[i])
		} else {
			gpu = append(gpu, r.DecodeDone.V.Sub(r.GPUStart.V).Seconds())
		}
		ttft = append(ttft, r.TTFTSec.V)
		decode = append(decode, append([]float64{r.TTFTSec.V}, r.ITLSec...))
		tokens = append(tokens, [2]int64{r.InputTokens.V, r.OutputTokens.V})
	}
	w := bufio.NewWriter(out)
	first := true
	key := func(k, v string) {
		if !first {
			w.WriteString(",\n")
		}
		first = false
		w.WriteString(`    "` + k + `": ` + v)
	}
	w.WriteString("{\n")
	key("bins", list(len(bins), func(i int) string { return strconv.Itoa(bins[i]) }))
	key("total_latency", pyFloat(total))
	key("raw_latency_values", floats(lat))
	key("raw_queuing_values", floats(queue))
	key("raw_kvc_io_time", floats(kvc))
	key("raw_gpu_time", floats(gpu))
	key("raw_ttft_values", floats(ttft))
	key("raw_decode_values", list(len(decode), func(i int) string { return floats(decode[i]) }))
	key("debug_val", "[]")
	key("finished_requests", strconv.Itoa(len(s.Records)))
	key("queued_requests", strconv.Itoa(s.Queued))
	key("failed_requests", "0")
	key("per_unit_throughput", list(len(s.PerSecondFinished), func(i int) string { return strconv.Itoa(s.PerSecondFinished[i]) }))
	key("per_unit_workers", list(len(s.PerSecondWorkers), func(i int) string { return strconv.Itoa(s.PerSecondWorkers[i]) }))
	key("per_unit_gpu_utilization", floats(s.PerSecondGPUUtil))
	key("latencies", floats(hist))
	key("stage_time_start", pyTime(s.Start))
	key("stage_time_end", pyTime(s.End))
	key("input_output_tokens_sz", list(len(tokens), func(i int) string {
		return "[" + strconv.FormatInt(tokens[i][0], 10) + ", " + strconv.FormatInt(tokens[i][1], 10) + "]"
	}))
	w.WriteString("\n}")
	return w.Flush()
}

func list(n int, item func(int) string) string {
	var b strings.Builder
	b.WriteByte('[')
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(item(i))
	}
	b.WriteByte(']')
	return b.String()
}

func floats(v []float64) string { return list(len(v), func(i int) string { return pyFloat(v[i]) }) }

// pyTime prints a stage time as Opal has it: SimPy's clock starts at the
// integer 0, so a stage that starts at 0 prints "0"; later times are floats.
func pyTime(t float64) string {
	if t == 0 {
		return "0"
	}
	return pyFloat(t)
}

// pyFloat formats f as Python's repr (and json.dumps) does: the shortest
// digits that read back to f, positional from 1e-4 up to 1e16 with a ".0"
// on whole numbers, else in exponent form with at least two exponent
// digits.
func pyFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	case f == 0:
		if math.Signbit(f) {
			return "-0.0"
		}
		return "0.0"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64)
	mant, exp, _ := strings.Cut(e, "e")
	x, _ := strconv.Atoi(exp)
	if x < -4 || x >= 16 {
		digits := strings.TrimPrefix(exp, "+")
		sign := "+"
		if strings.HasPrefix(digits, "-") {
			sign, digits = "-", digits[1:]
		}
		if len(digits) < 2 {
			digits = "0" + digits
		}
		return mant + "e" + sign + digits
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsAny(s, ".") {
		s += ".0"
	}
	return s
}
