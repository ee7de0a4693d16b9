package main

import (
	"encoding/csv"
	"math"
	"strconv"

	"github.com/opaltrace/opaltrace/internal/atomicfile"
	"github.com/opaltrace/opaltrace/replay"
)

// plannerLogHeader names --planner-log's columns: an adjustment's time,
// what the planner observed of the requests completed in the interval
// before it, its correction factors, what its predictor predicted of the
// next interval (requests, ISL, OSL), what its profile gave (one
// request's prefill at the predicted ISL; a decode worker's best output
// tokens a second within the corrected ITL target), the workers it asked
// for (with data parallelism, servers of a cluster file's dp ranks, as
// its workers count them), and whether it skipped the interval (nothing
// to observe: no change). Under the dynamo policy (load-based scaling) a
// row is an adjustment's time, the engines asked for, whether it was
// skipped (a pool still scaling), and the largest load of an engine of
// each pool (prefill: queued prompt tokens, in context lengths but for
// optimization_target load; decode: KV demand over capacity); the SLA
// planner's columns are empty, and its rows leave these two empty. An
// aggregated fleet's planner (agg) logs its engines and load in the
// decode columns (Dynamo's aggregated mode makes the decode decision).
var plannerLogHeader = []string{"at_s", "requests", "ttft_s", "itl_s", "duration_s", "isl", "osl",
	"prefill_factor", "decode_factor", "next_requests", "next_isl", "next_osl", "profile_prefill_s", "profile_decode_tokens_per_s",
	"prefill_workers", "decode_workers", "skipped", "prefill_load", "decode_load"}

// writePlannerLog writes the planner's adjustments to path as CSV, every
// number to full precision; a value the interval did not give is empty.
func writePlannerLog(path, policy string, agg bool, log []replay.PlannerAdjustment) error {
	f, err := atomicfile.Create(path)
	if err != nil {
		return err
	}
	defer f.Abort()
	w := csv.NewWriter(f)
	if err := w.Write(plannerLogHeader); err != nil {
		return err
	}
	num := func(v float64) string {
		if math.IsNaN(v) {
			return ""
		}
		return strconv.FormatFloat(v, 'g', -1, 64)
	}
	for _, a := range log {
		row := []string{num(a.At.Seconds()), strconv.FormatInt(a.Requests, 10), "", "", "", "", "",
			num(a.PrefillFactor), num(a.DecodeFactor), "", "", "", "", "", "", "", strconv.FormatBool(a.Skipped), num(a.PrefillLoad), num(a.DecodeLoad)}
		if policy == replay.PlannerDynamoLoad {
			row[1], row[7], row[8] = "", "", ""
			if !a.Skipped {
				row[14], row[15] = strconv.Itoa(a.Prefill), strconv.Itoa(a.Decode)
				if agg {
					row[14] = "" // one pool: the decode columns'
				}
			}
			if err := w.Write(row); err != nil {
				return err
			}
			continue
		}
		// Each empty when nothing was observed (NaN): TTFT, ITL and
		// ISL as tokens streamed, duration and OSL as requests ended.
		row[2], row[3], row[4], row[5], row[6] = num(a.TTFTSec), num(a.ITLSec), num(a.DurationSec), num(a.ISL), num(a.OSL)
		if !a.Skipped {
			row[9], row[10], row[11] = num(a.NextRequests), num(a.NextISL), num(a.NextOSL)
			row[12], row[13] = num(a.ProfilePrefillSec), num(a.ProfileDecodeTokensPerSec)
			row[14], row[15] = strconv.Itoa(a.Prefill), strconv.Itoa(a.Decode)
		}
		if err := w.Write(row); err != nil {
			return err
		}
	}
	w.Flush()
	if err := w.Error(); err != nil {
		return err
	}
	return f.Commit()
}
