package deploy

import "testing"

// The API servers' ranks given by hand are counted in ranks, a replay
// worker each, where the file's workers count servers: a server's whole
// dp (or DP-attention TP, here from a GPU count in the hardware's name)
// behind one API server is kept, and a count past the fleet's workers is
// refused with the fleet's bound, naming the file's line.
func TestAPIServerRanksOfServers(t *testing.T) {
	const (
		dp    = "model: qwen3-30b-a3b-instruct-2507\nhardware: h100\nworkers: 2\ndp: 4\nep: 4\n"
		dpa   = "model: deepseek-v2-lite\nhardware: 4xh100\nenable_dp_attention: true\nworkers: 2\nscheduler:\n  engine: sglang\n"
		split = "disaggregation:\n  prefill_workers: 1\n  prefill_dp: 4\n"
	)
	for _, c := range []struct {
		yaml           string
		workers, ranks int // the fleet's, and the API servers' ranks kept
		prefill        int // the prefill API servers' ranks kept
		want           string
	}{
		{yaml: dp + "client:\n  api_server_ranks: 8\n", workers: 8, ranks: 8},
		{yaml: dpa + "client:\n  api_server_ranks: 4\n", workers: 8, ranks: 4},
		{yaml: dp + "client:\n  prefill_api_server_ranks: 4\n" + split, workers: 8, ranks: 4, prefill: 4},
		{yaml: dp + "client:\n  api_server_ranks: 9\n", want: "c.yaml:7: client.api_server_ranks: 9 is not a number of workers in [0, 8]"},
		{yaml: dpa + "client:\n  api_server_ranks: 9\n", want: "c.yaml:8: client.api_server_ranks: 9 is not a number of workers in [0, 8]"},
		{yaml: dp + "client:\n  prefill_api_server_ranks: 9\n" + split, want: "c.yaml:7: client.prefill_api_server_ranks: 9 is not a number of workers in [0, 8]"},
		{yaml: dp + "client:\n  prefill_api_server_ranks: -1\n" + split, want: "c.yaml:7: client.prefill_api_server_ranks: -1 is not a number of workers in [0, 8]"},
		{yaml: dp + "client:\n  prefill_api_server_ranks: 2\n", want: "c.yaml:7: client.prefill_api_server_ranks: 2 without disaggregation (a prefill pool's API servers)"},
		// One rank a server: the file's own bound, at parse time.
		{yaml: "workers: 2\nclient:\n  api_server_ranks: 3\n", want: "c.yaml:3: client.api_server_ranks: 3 is not a number of workers in [0, 2]"},
	} {
		s, err := resolveSetup(c.yaml)
		switch {
		case c.want != "":
			if err == nil || err.Error() != c.want {
				t.Errorf("%q: error %v, want %s", c.yaml, err, c.want)
			}
		case err != nil:
			t.Errorf("%q: %v", c.yaml, err)
		case s.Config.Workers != c.workers || s.Config.Client.APIServerRanks != c.ranks || s.Config.Client.PrefillAPIServerRanks != c.prefill:
			t.Errorf("%q: %d workers, API servers of %d ranks and prefill ones of %d; want %d, %d and %d", c.yaml,
				s.Config.Workers, s.Config.Client.APIServerRanks, s.Config.Client.PrefillAPIServerRanks, c.workers, c.ranks, c.prefill)
		}
	}
}
