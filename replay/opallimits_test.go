package replay

import (
	"strings"
	"testing"
)

// TestOpalWorkloadTooLarge: a workload of 10¹² requests, by count or by
// rate × time, is refused when parsed, before anything is allocated.
func TestOpalWorkloadTooLarge(t *testing.T) {
	for _, c := range []struct{ cfg, want string }{
		{string(opalConfig(strings.Replace(uniformStage, `"total_requests": 200`, `"total_requests": 1e12`, 1))),
			"cfg.json: workload.stages[0].workload_params.total_requests: 1e+12 requests, more than the 20000000 a stage may generate (they are held in memory, about 300 bytes each)"},
		{string(opalConfig(strings.Replace(strings.Replace(strings.Replace(uniformStage, `"total_requests": 200`, `"total_requests": -1`, 1), `"request_rate": 4`, `"request_rate": 1000`, 1), `"time_duration_sec": -1`, `"time_duration_sec": 1e9`, 1))),
			"cfg.json: workload.stages[0].workload_params: about 1e+12 requests (total_requests, or request_rate × the stage's time), more than the 20000000 a stage may generate: its requests are held in memory (about 300 bytes each)"},
	} {
		_, err := ParseOpalWorkload([]byte(c.cfg), "cfg.json")
		if err == nil || err.Error() != c.want {
			t.Errorf("error\n %v\nwant\n %s", err, c.want)
		}
	}
}
