package deploy

import (
	"slices"
	"testing"
	"time"

	"github.com/opaltrace/opaltrace/trace"
)

// One client, two rounds, one in flight, 120 ms a request, seed 42: the
// first pop draws randrange(1) (two 32-bit draws: the first's top bit is
// 1), the sender sleeps expovariate(20) = 1.2664 ms, polls 50 ms three
// times until the completion at 120 ms, and sends round 2 at
// 151.266442 ms (CPython: 0.15126644195213695 s).
func TestBenchSenderByHand(t *testing.T) {
	b := benchMultiTurn{clients: 1, rounds: 2, maxParallel: 1, requestLen: 2048, outputLen: 16, rate: 20, seed: 42}
	got := b.sends(func(int, int) time.Duration { return 120 * time.Millisecond })
	want := []benchSend{{0, 1, 0}, {0, 2, 151_266_442}}
	if !slices.Equal(got, want) {
		t.Errorf("sends %v, want %v", got, want)
	}
}

// The sender's rules hold on the A10 benchmark's shape, with and without
// the round barrier: every request sent once, a client's rounds in order
// and each after the previous one completed, never more than
// max_parallel in flight, and with the barrier no round before the last
// one's completions.
func TestBenchSenderRules(t *testing.T) {
	for _, barrier := range []bool{false, true} {
		b := benchMultiTurn{clients: 20, rounds: 10, maxParallel: 4, requestLen: 2048, outputLen: 16, rate: 20, seed: 7, roundBarrier: barrier}
		lat := func(c, r int) time.Duration { return time.Duration(300+37*c+91*r) * time.Millisecond }
		sends := b.sends(lat)
		if len(sends) != b.clients*b.rounds {
			t.Fatalf("barrier %v: %d sends, want %d", barrier, len(sends), b.clients*b.rounds)
		}
		doneAt := map[[2]int]trace.Time{}
		var roundDone [11]trace.Time // the last completion of each round
		for _, s := range sends {
			d := s.at.Add(lat(s.client, s.round))
			doneAt[[2]int{s.client, s.round}] = d
			roundDone[s.round] = max(roundDone[s.round], d)
		}
		for i, s := range sends {
			if i > 0 && s.at < sends[i-1].at {
				t.Fatalf("barrier %v: send %d at %v before send %d at %v", barrier, i, s.at, i-1, sends[i-1].at)
			}
			if s.round > 1 {
				prev, ok := doneAt[[2]int{s.client, s.round - 1}]
				if !ok || prev > s.at {
					t.Errorf("barrier %v: client %d round %d sent at %v, its round %d done at %v", barrier, s.client, s.round, s.at, s.round-1, prev)
				}
				if barrier && roundDone[s.round-1] > s.at {
					t.Errorf("barrier: client %d round %d sent at %v before round %d ended at %v", s.client, s.round, s.at, s.round-1, roundDone[s.round-1])
				}
			}
			inFlight := 0
			for _, o := range sends[:i] {
				if doneAt[[2]int{o.client, o.round}] > s.at {
					inFlight++
				}
			}
			if inFlight >= b.maxParallel {
				t.Errorf("barrier %v: send %d with %d in flight", barrier, i, inFlight)
			}
		}
	}
}
