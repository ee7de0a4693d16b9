package ingest

import (
	"bytes"
	"io"

	gojson "github.com/goccy/go-json"

	"github.com/opaltrace/opaltrace/trace"
)

// sglangTrace reads the per-request TTFT/HiCache trace line proposed for
// SGLang (sgl-project/sglang#28047):
//
//	{"rid", "prompt_tokens", "input_tokens_cache_hit",
//	 "input_tokens_no_cache_hit", "output_tokens", "L1_hit", "L1_hit_pct",
//	 "L2_hit", "L2_hit_pct", "L3_hit", "L3_hit_pct", "L3_pf_alloc_ms",
//	 "L3_pf_io_ms", "L3_pf_tree_ms", "queue_ms", "schedule_ms",
//	 "forward_ms", "TTFT_ms"}
//
// plus the later "idle_in_queue_ms" and "budget_wait_ms", alone on a line
// or embedded in an ordinary log line (the object starting at `{"rid"`);
// other log lines are skipped. L1/L2/L3 are GPU/host/storage: device, host
// and storage hit tokens. Times are ms: queue_ms → queue_s, schedule_ms
// (wait-queue entry → first forward) → schedule_s, idle_in_queue_ms and
// budget_wait_ms (its parts), forward_ms → prefill_s, TTFT_ms → ttft_s
// (server basis), L3_pf_io_ms → storage_prefetch_io_s, and
// L3_pf_alloc + io + tree → storage_prefetch_s. No real file exists; the
// shape is the issue's. The line has no timestamp: arrival is absent.
const sglangTraceName = "sglang-trace"

var sglangTrace = Format{
	Name:      sglangTraceName,
	Sniff:     sniffSGLangTrace,
	NewReader: newSGLangTraceReader,
}

var sglangTraceStart = []byte(`{"rid"`)

func sniffSGLangTrace(head []byte) bool {
	i := bytes.Index(head, sglangTraceStart)
	return i >= 0 && bytes.Contains(head[i:], []byte(`"TTFT_ms"`)) && bytes.Contains(head[i:], []byte(`"L1_hit"`))
}

type sglangTraceLine struct {
	RID                   *string  `json:"rid"`
	PromptTokens          *float64 `json:"prompt_tokens"`
	InputTokensCacheHit   *float64 `json:"input_tokens_cache_hit"`
	InputTokensNoCacheHit *float64 `json:"input_tokens_no_cache_hit"`
	OutputTokens          *float64 `json:"output_tokens"`
	L1Hit                 *float64 `json:"L1_hit"`
	L2Hit                 *float64 `json:"L2_hit"`
	L3Hit                 *float64 `json:"L3_hit"`
	L3PfAllocMS           *float64 `json:"L3_pf_alloc_ms"`
	L3PfIOMS              *float64 `json:"L3_pf_io_ms"`
	L3PfTreeMS            *float64 `json:"L3_pf_tree_ms"`
	QueueMS               *float64 `json:"queue_ms"`
	ScheduleMS            *float64 `json:"schedule_ms"`
	IdleInQueueMS         *float64 `json:"idle_in_queue_ms"`
	BudgetWaitMS          *float64 `json:"budget_wait_ms"`
	ForwardMS             *float64 `json:"forward_ms"`
	TTFTMS                *float64 `json:"TTFT_ms"`
}

type sglangTraceReader struct {
	lineRun
}

func newSGLangTraceReader(r io.Reader, file, run string, opts Options) Reader {
	return &sglangTraceReader{newLineRun(r, file, run, sglangTraceName, "sglang", opts)}
}

func (r *sglangTraceReader) Scan() bool {
	for {
		line, ok := r.nextLine()
		if !ok {
			return false
		}
		if r.overLong() {
			return true
		}
		i := bytes.Index(line, sglangTraceStart)
		if i < 0 {
			continue // an ordinary log line
		}
		_, end, msg := scanObject(line, i)
		if msg != "" {
			r.cur = r.bad(msg)
			return true
		}
		var l sglangTraceLine
		if err := gojson.Unmarshal(line[i:end], &l); err != nil {
			r.cur = r.bad("invalid JSON: " + shortJSONErr(err))
			return true
		}
		r.setRequest(r.request(&l))
		return true
	}
}

func (r *sglangTraceReader) request(l *sglangTraceLine) (*trace.Request, string) {
	q := r.startRequest(stringOr(l.RID))
	q.TTFTBasis = trace.TTFTServer
	q.OutputTokensSource = trace.OutputServerUsage
	for _, c := range []countField{
		{"prompt_tokens", l.PromptTokens, &q.InputTokens},
		{"output_tokens", l.OutputTokens, &q.OutputTokens},
		{"input_tokens_cache_hit", l.InputTokensCacheHit, &q.CachedTokens},
		{"L1_hit", l.L1Hit, &q.DeviceHitTokens},
		{"L2_hit", l.L2Hit, &q.HostHitTokens},
		{"L3_hit", l.L3Hit, &q.StorageHitTokens},
	} {
		if c.v == nil {
			continue
		}
		n, msg := checkCount(*c.v)
		if msg != "" {
			return nil, c.name + ": " + msg
		}
		*c.dst = trace.Some(n)
	}
	if l.InputTokensNoCacheHit != nil {
		if _, msg := checkCount(*l.InputTokensNoCacheHit); msg != "" {
			return nil, "input_tokens_no_cache_hit: " + msg
		}
	}
	ms := func(name string, v *float64, dst *trace.Opt[float64]) string {
		if v == nil {
			return ""
		}
		if msg := checkSec(*v); msg != "" {
			return name + ": " + msg
		}
		*dst = trace.Some(*v / 1000)
		return ""
	}
	var alloc, tree trace.Opt[float64]
	for _, f := range []struct {
		name string
		v    *float64
		dst  *trace.Opt[float64]
	}{
		{"queue_ms", l.QueueMS, &q.QueueSec}, {"schedule_ms", l.ScheduleMS, &q.ScheduleSec},
		{"idle_in_queue_ms", l.IdleInQueueMS, &q.IdleInQueueSec}, {"budget_wait_ms", l.BudgetWaitMS, &q.BudgetWaitSec},
		{"forward_ms", l.ForwardMS, &q.PrefillSec}, {"TTFT_ms", l.TTFTMS, &q.TTFTSec},
		{"L3_pf_io_ms", l.L3PfIOMS, &q.StoragePrefetchIOSec},
		{"L3_pf_alloc_ms", l.L3PfAllocMS, &alloc}, {"L3_pf_tree_ms", l.L3PfTreeMS, &tree},
	} {
		if msg := ms(f.name, f.v, f.dst); msg != "" {
			return nil, msg
		}
	}
	if q.PrefillSec.OK {
		q.PrefillBasis = trace.PrefillScheduled // forward entry → first token
	}
	if alloc.OK && tree.OK && q.StoragePrefetchIOSec.OK {
		q.StoragePrefetchSec = trace.Some((*l.L3PfAllocMS + *l.L3PfIOMS + *l.L3PfTreeMS) / 1000)
	}
	if err := q.Validate(); err != nil {
		return nil, err.Error()
	}
	return q, ""
}
