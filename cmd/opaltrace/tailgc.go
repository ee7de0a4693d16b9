package main

import (
	"math"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// tailHeadroom is how far the memory may grow, past what the process
// holds when replayRuns' last run has replayed, before the garbage
// collector runs again (pauseGC): the summaries' passes collect at most
// passBudget values (analyze, 128 MiB) and the writer's last row group
// reuses its buffers.
const tailHeadroom = 256 << 20

// gcPause counts the pauseGC calls not yet resumed, under its mutex;
// saved holds the settings the first one replaced.
var gcPause struct {
	sync.Mutex
	n            int
	percent      int
	limit        int64
	limitChanged bool
}

// pauseGC turns the garbage collector off, up to tailHeadroom more
// memory, for the rest of a replay whose records are all kept for its
// summaries, once the last run has replayed; the returned function
// restores the settings (commands run in one process in tests).
//
// Note: once the engine is done, what the process holds stays live
// until it exits (the records the summaries read again, the file's last
// row groups), so a collection then frees next to nothing and costs a
// mark of the whole heap: on the 4-worker Mooncake replay, a cycle that
// fell after the replay (about one run in three) marked 170 MB with 26 ms
// stopped and some 150 ms of CPU, as long as the summary's passes
// themselves. The memory limit is a safety net, not a target: past it
// the collector runs as before.
func pauseGC() (resume func()) {
	gcPause.Lock()
	defer gcPause.Unlock()
	if gcPause.n == 0 {
		held := []metrics.Sample{{Name: "/memory/classes/total:bytes"}}
		metrics.Read(held)
		limit := debug.SetMemoryLimit(-1)
		gcPause.limit, gcPause.limitChanged = limit, false
		if held[0].Value.Kind() == metrics.KindUint64 {
			if l := held[0].Value.Uint64() + tailHeadroom; l < math.MaxInt64 && int64(l) < limit {
				debug.SetMemoryLimit(int64(l))
				gcPause.limitChanged = true
			}
		}
		gcPause.percent = debug.SetGCPercent(-1)
	}
	gcPause.n++
	var once sync.Once
	return func() {
		once.Do(func() {
			gcPause.Lock()
			defer gcPause.Unlock()
			if gcPause.n--; gcPause.n == 0 {
				debug.SetGCPercent(gcPause.percent)
				if gcPause.limitChanged {
					debug.SetMemoryLimit(gcPause.limit)
				}
			}
		})
	}
}
