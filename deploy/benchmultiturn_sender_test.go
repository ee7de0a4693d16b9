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
	want := []benchSend{{0, 1, 0, -1}, {0, 2, 151_266_442, 0}}
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
		// Sub-questions go out in the order of completions: the k-th
		// completion of a client with rounds left pops sub-question k.
		var byDone []benchSend
		for _, s := range sends {
			if s.round < b.rounds {
				byDone = append(byDone, benchSend{client: s.client, round: s.round, at: s.at.Add(lat(s.client, s.round))})
			}
		}
		slices.SortStableFunc(byDone, func(x, y benchSend) int { return int(x.at - y.at) })
		next := map[[2]int]int{} // (client, round) → its sub-question
		for k, d := range byDone {
			next[[2]int{d.client, d.round + 1}] = k
		}
		for _, s := range sends {
			want, ok := next[[2]int{s.client, s.round}]
			if !ok {
				want = -1
			}
			if s.subq != want {
				t.Errorf("barrier %v: client %d round %d has sub-question %d, want %d", barrier, s.client, s.round, s.subq, want)
			}
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

// Two prompts share block ids exactly as far as their text agrees: a
// client's rounds extend each other, another client shares nothing, and
// the same client given another sub-question in round 2 shares its first
// request and output only, also when outputs do not fill a block.
func TestBenchBlockIDs(t *testing.T) {
	for _, out := range []int64{16, 1} {
		b := benchMultiTurn{clients: 2, rounds: 3, requestLen: 2048, outputLen: out}
		common := func(x, y []int64) int {
			n := 0
			for n < min(len(x), len(y)) && x[n] == y[n] {
				n++
			}
			return n
		}
		r3 := b.blockIDs(0, []int{0, 1})
		if got, want := len(r3), int(b.prompt(3)/benchBlock); got != want {
			t.Fatalf("output %d: %d ids, want %d", out, got, want)
		}
		r2 := b.blockIDs(0, []int{0})
		if n := common(r2, r3); n != len(r2) {
			t.Errorf("output %d: round 3 shares %d of round 2's %d ids", out, n, len(r2))
		}
		if n := common(b.blockIDs(1, []int{0, 1}), r3); n != 0 {
			t.Errorf("output %d: another client shares %d ids", out, n)
		}
		// 2048 + out tokens agree: whole blocks of them.
		if n, want := common(b.blockIDs(0, []int{1, 0}), r3), int((2048+out)/benchBlock); n != want {
			t.Errorf("output %d: another round-2 sub-question shares %d ids, want %d", out, n, want)
		}
		seen := map[int64]bool{}
		for _, id := range r3 {
			if seen[id] {
				t.Errorf("output %d: id %d twice in one prompt", out, id)
			}
			seen[id] = true
		}
	}
}
