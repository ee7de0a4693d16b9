package calibrate

import (
	"slices"
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/replay"
	"github.com/opaltrace/opaltrace/trace"
)

// burstRun is n requests sent gap apart from t = 0, with short prompts
// (20–69 tokens) and outputs (20–59), so that the steps take them faster
// than an API server of a few milliseconds hands them over, as in the
// bursts of cached or one-token prompts the coefficient is for.
func burstRun(n int, gapNs int64, seed uint64) replay.Requests {
	reqs := poissonRun(n, 1, seed)
	for i, r := range reqs {
		r.Arrival = trace.Some(trace.Time(int64(i) * gapNs))
		r.InputTokens = trace.Some(int64(20 + (i*7)%50))
		r.OutputTokens = trace.Some(int64(20 + (i*13)%40))
	}
	return reqs
}

// apiRuns are a light Poisson load, a burst of 40 requests sent at once
// (training) and a burst of 80 (held out), replayed with truth.
func apiRuns(t *testing.T, truth candidate) []*ReplayRun {
	t.Helper()
	dep := deployment(t, "llama-3.1-8b")
	kv, err := dep.KVCacheTokens(0.9)
	if err != nil {
		t.Fatal(err)
	}
	inputs := []replay.Requests{poissonRun(80, 2, 1), burstRun(40, 0, 2), burstRun(80, 0, 3)}
	var runs []*ReplayRun
	for i, in := range inputs {
		r := &ReplayRun{
			Label: "run", Run: trace.Run{Name: "synthetic#" + string(rune('1'+i))}, Deployment: dep,
			Config: replay.DefaultConfig(), KVBlocks: kv / 16, Inputs: in, Train: i < 2,
		}
		observe(t, r, truth)
		runs = append(runs, r)
	}
	return runs
}

// TestFitReplayRecoversAPIServer fits runs replayed with an API server of
// 4 ms a request: the fit finds it within 5 %, reproduces the training
// runs within 4 % (the light run's median TTFT is the loosest, at −3.3 %:
// its overhead is fitted 2.6 % low) and predicts the held-out burst of
// twice the size within 5 %.
func TestFitReplayRecoversAPIServer(t *testing.T) {
	truth := candidate{CoefMFU: 0.3, CoefAttentionMFU: 0.3, CoefBandwidthEff: 0.55, CoefLinkEff: 0.8,
		CoefStepOverhead: 3e-4, CoefRequestOverhead: 0.02, CoefAPIServer: 4e-3}
	runs := apiRuns(t, truth)
	free := []string{CoefMFU, CoefBandwidthEff, CoefRequestOverhead, CoefAPIServer}
	cm, err := FitReplay(runs, ReplayOptions{Free: free, MaxEvals: 300, PriorWeight: -1})
	if err != nil {
		t.Fatal(err)
	}
	checkRecovered(t, cm, truth, map[string]float64{CoefMFU: 0.05, CoefBandwidthEff: 0.05, CoefRequestOverhead: 0.05, CoefAPIServer: 0.05})
	for _, row := range cm.Replay.Rows {
		if tol := map[string]float64{"train": 0.04, "holdout": 0.05}[row.Set]; abs(row.CalErr) > tol {
			t.Errorf("%s %s (%s): calibrated error %+.1f%%", row.Run, row.Target, row.Set, 100*row.CalErr)
		}
	}
}

func abs(x float64) float64 { return max(x, -x) }

// The API server's time is fitted only when asked for: with a burst in
// training a warning says to --fit it, without one --fit is refused; a
// closed loop of several clients counts as a burst.
func TestAPIServerOffered(t *testing.T) {
	truth := candidate{CoefMFU: 0.5, CoefBandwidthEff: 0.8, CoefLinkEff: 0.8, CoefStepOverhead: 3e-4}
	runs := apiRuns(t, truth)
	for _, burst := range []bool{true, false} {
		runs[1].Train = burst
		free, warnings := defaultFree(runs, shares{})
		if slices.Contains(free, CoefAPIServer) {
			t.Errorf("burst in training %v: default free %v has %s", burst, free, CoefAPIServer)
		}
		want := CoefAPIServer + " not fitted: no training run sends a burst"
		if burst {
			want = CoefAPIServer + " not fitted unless asked"
		}
		if !slices.ContainsFunc(warnings, func(w string) bool { return strings.HasPrefix(w, want) }) {
			t.Errorf("burst in training %v: no warning %q in %q", burst, want, warnings)
		}
	}
	_, err := FitReplay(runs, ReplayOptions{Free: []string{CoefMFU, CoefAPIServer}, MaxEvals: 10})
	if err == nil || !strings.Contains(err.Error(), "no training run sends a burst") {
		t.Errorf("--fit %s without a burst: %v", CoefAPIServer, err)
	}
	// Requests 0.5 ms apart are a burst; 2 ms apart are not.
	runs[0].Inputs = burstRun(40, 500_000, 4)
	if !burstRuns(runs) {
		t.Error("requests 0.5 ms apart: not a burst")
	}
	runs[0].Inputs = burstRun(40, 2_000_000, 4)
	if burstRuns(runs) {
		t.Error("requests 2 ms apart: a burst")
	}
	runs[0].Config.Workload = replay.WorkloadConfig{Mode: replay.ModeClosed, Clients: 8}
	if !burstRuns(runs) {
		t.Error("a closed loop of 8 clients: not a burst")
	}
}

// A cost model with the coefficient sets the replay's API server.
func TestAPIServerApply(t *testing.T) {
	cm := candidate{CoefMFU: 0.5, CoefAPIServer: 2.5e-3, CoefRequestOverhead: 0.01}.costModel()
	cfg := replay.DefaultConfig()
	cm.ClientOverhead().ApplyConfig(&cfg)
	if cfg.Client.APIServerRequestSec != 2.5e-3 || cfg.Client.LatencySec != 0.005 {
		t.Errorf("client %+v, want api_server_request_s 0.0025 and latency_s 0.005", cfg.Client)
	}
}

// --fix takes a coefficient the runs could determine out of the default
// free set instead of failing as both fitted and fixed.
func TestFixLeavesDefaultFree(t *testing.T) {
	runs := apiRuns(t, candidate{CoefMFU: 0.5, CoefBandwidthEff: 0.8, CoefLinkEff: 0.8, CoefStepOverhead: 3e-4})
	p, err := newReplayProblem(runs, ReplayOptions{Fixed: map[string]float64{CoefMFU: 0.5}})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(p.free, CoefMFU) || !slices.Contains(p.free, CoefBandwidthEff) {
		t.Errorf("--fix %s=0.5: free %v, want %s out and %s in", CoefMFU, p.free, CoefMFU, CoefBandwidthEff)
	}
}
