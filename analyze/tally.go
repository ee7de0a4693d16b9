package analyze

import "github.com/opaltrace/opaltrace/trace"

// A tally holds what both summarizers (Summarizer, in memory, and
// StreamSummarizer, by passes) count of each request alike: statuses,
// the time span, token semantics, streamed chunks and goodput, and the
// summary's counts and token totals. One type serves both, so that their
// summaries cannot drift apart.
type tally struct {
	status              map[trace.Status]int
	sem                 semanticsSet
	span                span
	chunks, chunkTokens int64
	good                *Goodput // nil without SLOs
}

func newTally(slo SLO) tally {
	t := tally{status: map[trace.Status]int{}, span: newSpan()}
	if !slo.Empty() {
		t.good = &Goodput{SLO: slo}
	}
	return t
}

// add counts r into t and s's counts and token totals, and says whether r
// completed (only a completed request has latencies to summarize).
func (t *tally) add(s *Summary, r *trace.Request) bool {
	t.status[r.Status]++
	t.span.add(r)
	if !r.OK() {
		s.Failed++
		return false
	}
	t.sem.add(r)
	s.Completed++
	s.TotalInputTokens += r.InputTokens.Or(0)
	s.TotalOutputTokens += r.OutputTokens.Or(0)
	if r.ITLUnit == trace.ITLChunk && r.ITLSec != nil && r.OutputTokens.OK {
		t.chunks += int64(len(r.ITLSec) + 1)
		t.chunkTokens += r.OutputTokens.V
	}
	if t.good != nil && t.good.Missing == "" {
		judgeGoodput(t.good, r)
	}
	return true
}

// fill sets what s takes from the tally: statuses, semantics (and their
// warning), tokens per chunk, the duration (of trim's window when trimmed)
// with the throughputs over it, and goodput.
func (t *tally) fill(s *Summary, trim *TrimWindow) {
	for _, st := range Statuses {
		if n := t.status[st]; n > 0 {
			s.ByStatus = append(s.ByStatus, StatusCount{st, n})
		}
	}
	s.Semantics = t.sem.semantics()
	if s.Semantics == (Semantics{}) {
		// No request says how it was measured (a summary-only run): the
		// run does, where its reader recorded the source's way.
		x := s.Run.Extra
		s.Semantics = Semantics{ITLUnit: x["itl_unit"], E2EBasis: x["e2e_basis"], TTFTBasis: x["ttft_basis"], OutputTokens: x["output_tokens_source"]}
	}
	if s.Semantics.Mixed {
		s.Warnings = append(s.Warnings, mixedWarning)
	}
	if t.chunks > 0 {
		s.TokensPerChunk = float64(t.chunkTokens) / float64(t.chunks)
	}
	s.DurationSec, s.DurationMeasured = duration(s.Run, trim, t.span)
	if s.DurationSec > 0 {
		s.RequestThroughput, s.InputThroughput, s.OutputThroughput, s.TotalTokenThroughput =
			throughputs(int64(s.Completed), s.TotalInputTokens, s.TotalOutputTokens, s.DurationSec)
	}
	if t.good != nil {
		finishGoodput(t.good, s.DurationSec)
		s.Goodput = t.good
	}
}
