package analyze

import "github.com/opaltrace/opaltrace/trace"

// KVTiers names the KV cache tiers, fastest first.
var KVTiers = []string{"device", "host", "storage", "remote"}

// KVUsage is what the prefix cache served, over completed requests that
// report cached tokens.
type KVUsage struct {
	Requests     int   // completed requests with cached_tokens
	InputTokens  int64 // their prompt tokens
	CachedTokens int64 // of which served from cache
	// CachedShare is CachedTokens / InputTokens.
	CachedShare float64
	// TierTokens are hits by tier (per KVTiers), over requests reporting
	// at least one tier; TierShare are those over the same requests'
	// prompt tokens, and TierOfCached over their cached tokens.
	TierRequests int
	TierTokens   []int64
	TierShare    []float64
	TierOfCached []float64
}

// KVCacheUsage returns the cached-token share and the hits by tier, or nil
// when no completed request reports cached tokens or tier hits.
func KVCacheUsage(reqs []*trace.Request) *KVUsage {
	u := &KVUsage{TierTokens: make([]int64, 4), TierShare: make([]float64, 4), TierOfCached: make([]float64, 4)}
	var tierIn, tierCached int64
	for _, r := range reqs {
		if !r.OK() {
			continue
		}
		if r.CachedTokens.OK {
			u.Requests++
			u.InputTokens += r.InputTokens.Or(0)
			u.CachedTokens += r.CachedTokens.V
		}
		tiers := []trace.Opt[int64]{r.DeviceHitTokens, r.HostHitTokens, r.StorageHitTokens, r.RemoteHitTokens}
		any := false
		for _, t := range tiers {
			any = any || t.OK
		}
		if !any {
			continue
		}
		u.TierRequests++
		tierIn += r.InputTokens.Or(0)
		var sum int64
		for i, t := range tiers {
			u.TierTokens[i] += t.Or(0)
			sum += t.Or(0)
		}
		tierCached += r.CachedTokens.Or(sum)
	}
	if u.Requests == 0 && u.TierRequests == 0 {
		return nil
	}
	if u.InputTokens > 0 {
		u.CachedShare = float64(u.CachedTokens) / float64(u.InputTokens)
	}
	for i, t := range u.TierTokens {
		if tierIn > 0 {
			u.TierShare[i] = float64(t) / float64(tierIn)
		}
		if tierCached > 0 {
			u.TierOfCached[i] = float64(t) / float64(tierCached)
		}
	}
	return u
}
