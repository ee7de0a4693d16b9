package analyze

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/opaltrace/opaltrace/trace"
)

// An SLO is a set of service-level objectives in milliseconds, vLLM's
// --goodput ttft:MS tpot:MS e2el:MS. Absent fields are not checked.
type SLO struct {
	TTFTms, TPOTms, E2ELms trace.Opt[float64]
}

// Empty reports whether no objective is set.
func (o SLO) Empty() bool { return !o.TTFTms.OK && !o.TPOTms.OK && !o.E2ELms.OK }

// String returns the objectives in --goodput syntax.
func (o SLO) String() string {
	var parts []string
	add := func(k string, v trace.Opt[float64]) {
		if v.OK {
			parts = append(parts, k+":"+strconv.FormatFloat(v.V, 'f', -1, 64))
		}
	}
	add("ttft", o.TTFTms)
	add("tpot", o.TPOTms)
	add("e2el", o.E2ELms)
	return strings.Join(parts, " ")
}

// ParseSLO parses vLLM's --goodput pairs "KEY:MS" with KEY one of ttft,
// tpot, e2el and MS a non-negative number of milliseconds. Several pairs
// may share one argument, separated by spaces or commas.
func ParseSLO(args []string) (SLO, error) {
	var o SLO
	for _, arg := range args {
		for _, pair := range strings.FieldsFunc(arg, func(r rune) bool { return r == ' ' || r == ',' }) {
			k, v, ok := strings.Cut(pair, ":")
			if !ok {
				return o, fmt.Errorf("goodput: %q is not KEY:MS", pair)
			}
			ms, err := strconv.ParseFloat(v, 64)
			if err != nil || !(ms >= 0) || math.IsInf(ms, 0) {
				return o, fmt.Errorf("goodput: %s: %q is not a non-negative number of milliseconds", k, v)
			}
			switch k {
			case "ttft":
				o.TTFTms = trace.Some(ms)
			case "tpot":
				o.TPOTms = trace.Some(ms)
			case "e2el":
				o.E2ELms = trace.Some(ms)
			default:
				return o, fmt.Errorf("goodput: %q is not one of ttft, tpot, e2el", k)
			}
		}
	}
	return o, nil
}

// Goodput is the number of completed requests that met every SLO, and that
// number over the run's duration (vLLM's request_goodput).
type Goodput struct {
	SLO        SLO
	Good       int
	Throughput float64 // good / duration, req/s; 0 when the duration is unknown
	// Missing says why goodput could not be computed (a chosen metric the
	// data does not have); Good and Throughput are then zero.
	Missing string
}

// ComputeGoodput applies vLLM's definition (DistServe's): a completed
// request is good iff each chosen metric is ≤ its SLO, comparing seconds
// with SLO ms/1000 as vLLM does; TPOT is (E2E − TTFT)/(output − 1), and 0
// for requests with at most one output token, as vLLM counts it.
func ComputeGoodput(reqs []*trace.Request, slo SLO, durationSec float64) *Goodput {
	g := &Goodput{SLO: slo}
	for _, r := range reqs {
		if g.Missing != "" {
			break
		}
		judgeGoodput(g, r)
	}
	finishGoodput(g, durationSec)
	return g
}

// judgeGoodput counts request r if it is completed and good, or sets
// g.Missing when it lacks a metric an SLO names. The summary made by
// passes calls it request by request, as ComputeGoodput does.
func judgeGoodput(g *Goodput, r *trace.Request) {
	if !r.OK() {
		return
	}
	slo := g.SLO
	sec := func(o trace.Opt[float64]) float64 { return o.V / 1000 }
	good := true
	if slo.TTFTms.OK {
		if !r.TTFTSec.OK {
			g.Missing = missingMetric(r, "ttft")
			return
		}
		good = good && sec(slo.TTFTms) >= r.TTFTSec.V
	}
	if slo.TPOTms.OK {
		tpot := 0.0
		if n := r.OutputTokens.Or(0); n > 1 {
			if !r.E2ESec.OK || !r.TTFTSec.OK {
				g.Missing = missingMetric(r, "tpot (needs e2e and ttft)")
				return
			}
			tpot = (r.E2ESec.V - r.TTFTSec.V) / float64(n-1)
		}
		good = good && sec(slo.TPOTms) >= tpot
	}
	if slo.E2ELms.OK {
		if !r.E2ESec.OK {
			g.Missing = missingMetric(r, "e2el")
			return
		}
		good = good && sec(slo.E2ELms) >= r.E2ESec.V
	}
	if good {
		g.Good++
	}
}

// finishGoodput divides by the duration, or zeroes a goodput that could
// not be computed.
func finishGoodput(g *Goodput, durationSec float64) {
	if g.Missing != "" {
		g.Good = 0
		return
	}
	if durationSec > 0 {
		g.Throughput = float64(g.Good) / durationSec
	}
}

func missingMetric(r *trace.Request, metric string) string {
	return fmt.Sprintf("request %s has no %s", r.RequestID, metric)
}
