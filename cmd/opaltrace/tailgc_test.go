package main

import (
	"runtime/debug"
	"sync"
	"testing"
)

// TestPauseGC checks that pauseGC turns the collector off with a memory
// limit as a safety net, and that the last of overlapping pauses (replays
// run side by side in one test process) restores the settings the first
// replaced, however they interleave; a resume called twice counts once.
func TestPauseGC(t *testing.T) {
	percent := debug.SetGCPercent(77)
	limit := debug.SetMemoryLimit(5 << 40)
	defer func() {
		debug.SetGCPercent(percent)
		debug.SetMemoryLimit(limit)
	}()
	resume := pauseGC()
	if p := debug.SetGCPercent(-1); p != -1 {
		t.Errorf("GC percent %d while paused, want -1 (off)", p)
	}
	if l := debug.SetMemoryLimit(-1); l >= 5<<40 || l < tailHeadroom {
		t.Errorf("memory limit %d while paused, want the memory held + %d", l, tailHeadroom)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			r := pauseGC()
			r()
			r()
		})
	}
	wg.Wait()
	if p := debug.SetGCPercent(-1); p != -1 {
		t.Errorf("GC percent %d after other pauses ended, while the first holds, want -1", p)
	}
	resume()
	resume()
	if p := debug.SetGCPercent(percent); p != 77 {
		t.Errorf("GC percent %d after the last resume, want 77", p)
	}
	if l := debug.SetMemoryLimit(limit); l != 5<<40 {
		t.Errorf("memory limit %d after the last resume, want %d", l, int64(5<<40))
	}
}
