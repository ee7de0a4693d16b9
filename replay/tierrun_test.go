package replay

import (
	"reflect"
	"testing"
	"time"

	"github.com/opaltrace/opaltrace/trace"
)

// Holding requests' private blocks as runs (kvcache.Tier.StoreRun)
// changes no record and no statistic: the same replays with every block
// stored on its own, under load that preempts (vLLM) or retracts
// (SGLang), so that requests look their own stored blocks up again; the
// validator checks every step and record (a reload after a preemption
// is none of the first schedule's: Ready stays before GPUStart).
func TestTierRunsSameResults(t *testing.T) {
	t.Parallel()
	vcfg := DefaultConfig()
	vcfg.Workers = 3
	vcfg.Scheduler.KVCacheTokens = 150 * 16
	vcfg.Scheduler.MaxNumBatchedTokens = 512
	vcost := linearCost{Base: ms, PerToken: 20 * time.Microsecond, PerContext: 10 * time.Nanosecond}
	hcfg, hcost := hiConfig(64 * 16)
	hcfg.Workers = 2
	for _, c := range []struct {
		name string
		cfg  Config
		cost linearCost
		spec func() *Offload
	}{
		{"vllm", vcfg, vcost, func() *Offload { o := tierSpec(t, 100, 200, 0); o.BlockTokens = 32; return o }},
		{"vllm+remote", vcfg, vcost, func() *Offload { o := tierSpec(t, 100, 200, 400); o.BlockTokens = 32; return o }},
		{"hicache", hcfg, hcost, func() *Offload { return hiSpec(t, 60, 200, 0, PrefetchWaitComplete, 4) }},
		{"hicache+remote,selective", hcfg, hcost, func() *Offload {
			o := hiSpec(t, 60, 0, 300, PrefetchBestEffort, 1)
			o.WritePolicy = WriteThroughSelective
			return o
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			reqs := randomTrace(7, 400, 400)
			run := func(byBlock bool) (string, Stats) {
				spec := c.spec()
				spec.blockByBlock = byBlock
				var all []*trace.Request
				v := newValidator(t, c.cfg, reqs)
				st, err := RunInputs(c.cfg, c.cost, 0, Requests(reqs), func(r *trace.Request) error {
					all = append(all, r)
					return v.output(r)
				}, Options{Offload: spec, Observe: v.step})
				if err != nil {
					t.Fatal(err)
				}
				v.finish(all)
				return dump(all), st
			}
			blocks, bst := run(true)
			runs, rst := run(false)
			if runs != blocks {
				t.Errorf("records differ with runs:\n%s", firstDiff(blocks, runs))
			}
			if !reflect.DeepEqual(rst, bst) {
				t.Errorf("stats differ: %+v\n%+v", rst, bst)
			}
			if rst.Preemptions == 0 {
				t.Errorf("no preemption: %+v", rst)
			}
		})
	}
}
