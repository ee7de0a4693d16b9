package kvcache

import (
	"slices"
	"testing"
	"time"

	"github.com/opaltrace/opaltrace/model"
	"github.com/opaltrace/opaltrace/trace"
)

// A fabric of one 10 GB/s link with 10 µs latency: transfers over it
// share it equally (processor sharing), as Opal's AbstractDevice does.
type oneLink struct{ *Fabric }

func testLink(t *testing.T) oneLink {
	t.Helper()
	f := NewFabric()
	if _, err := f.AddLink(model.Link{Name: "t", Bandwidth: 10e9, Latency: 10 * time.Microsecond}); err != nil {
		t.Fatal(err)
	}
	return oneLink{f}
}

// Start starts a transfer over the one link.
func (l oneLink) Start(now trace.Time, id, n int64) ([]Done, error) {
	return l.Fabric.Start(now, id, n, []int{0})
}

const gb = 1_000_000_000

// runAll drives the link the way an event loop does, to the end.
func runAll(t *testing.T, l oneLink) []Done {
	t.Helper()
	var all []Done
	for {
		at, ok := l.Next()
		if !ok {
			return all
		}
		all = append(all, l.Advance(at)...)
	}
}

// One 1 GB transfer: 10 µs + 1e9 B / 10e9 B/s = 100.01 ms, the static
// price of the link.
func TestOneLinkOneTransfer(t *testing.T) {
	l := testLink(t)
	if _, err := l.Start(0, 1, gb); err != nil {
		t.Fatal(err)
	}
	got := runAll(t, l)
	want := []Done{{ID: 1, At: trace.Time(100_010_000)}}
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if st := (model.Link{Bandwidth: 10e9, Latency: 10 * time.Microsecond}).TransferTime(gb); trace.Time(st) != want[0].At {
		t.Errorf("static price %v differs from the link alone", st)
	}
}

// Two transfers of 1 GB and 2 GB started together share 10 GB/s: each
// gets 5 GB/s, so the first ends after 10 µs + 200 ms; the second then
// has 1 GB left alone at 10 GB/s: + 100 ms.
func TestOneLinkTwoConcurrent(t *testing.T) {
	l := testLink(t)
	if _, err := l.Start(0, 1, gb); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Start(0, 2, 2*gb); err != nil {
		t.Fatal(err)
	}
	got := runAll(t, l)
	want := []Done{{1, 200_010_000}, {2, 300_010_000}}
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// Staggered: A (1 GB) at 0 runs alone from 10 µs to 50.01 ms and moves
// 0.5 GB; B (1 GB) starts at 50 ms and joins at 50.01 ms. Sharing, A's
// last 0.5 GB at 5 GB/s end at 150.01 ms, when B has moved 0.5 GB; B's
// last 0.5 GB alone take 50 ms more: 200.01 ms. Equal sizes started at
// the same time finish together, in id order.
func TestOneLinkStaggered(t *testing.T) {
	l := testLink(t)
	_, _ = l.Start(0, 7, gb)
	if done := l.Advance(50_000_000); len(done) != 0 {
		t.Fatalf("early completions %v", done)
	}
	if _, err := l.Start(50_000_000, 3, gb); err != nil {
		t.Fatal(err)
	}
	got := runAll(t, l)
	want := []Done{{7, 150_010_000}, {3, 200_010_000}}
	// Start reports completions it passes over.
	l2 := testLink(t)
	_, _ = l2.Start(0, 1, 1000)
	if done, err := l2.Start(5_000_000, 2, 1000); err != nil || !slices.Equal(done, []Done{{1, 10_100}}) {
		t.Errorf("Start passing a completion: %v, %v", done, err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}

	l = testLink(t)
	for id := int64(3); id >= 1; id-- {
		_, _ = l.Start(0, id, gb)
	}
	got = runAll(t, l)
	want = []Done{{1, 300_010_000}, {2, 300_010_000}, {3, 300_010_000}}
	if !slices.Equal(got, want) {
		t.Errorf("three equal: got %v, want %v", got, want)
	}
}

func TestOneLinkErrors(t *testing.T) {
	if _, err := NewFabric().AddLink(model.Link{Bandwidth: 0}); err == nil {
		t.Error("zero bandwidth accepted")
	}
	l := testLink(t)
	l.Advance(1000)
	if _, err := l.Start(999, 1, 10); err == nil {
		t.Error("start in the past accepted")
	}
	if _, err := l.Start(1000, 1, -1); err == nil {
		t.Error("negative size accepted")
	}
	if _, ok := l.Next(); ok {
		t.Error("idle link has a next event")
	}
}
