package replay

import "github.com/opaltrace/opaltrace/trace"

// A scheduler is one worker's engine scheduler and the KV cache it owns:
// it decides what each step computes and holds the memory the requests
// use. The worker keeps what every engine shares (the running list, the
// waiting queue, the step being built, token emission); the engine loop
// talks to the scheduler only through these methods, so a new engine is
// one file with its type and one line of the schedulers table.
//
// Note: the methods take the worker rather than the scheduler keeping a
// pointer to it, as vidur's replica schedulers are handed their replica:
// the worker's lists are the scheduler's input and output.
type scheduler interface {
	// build builds the next step at now into w.sched and w.batch (with
	// w.add), counting preempted requests in w.preempted.
	build(w *worker, now trace.Time)
	// steady reports whether the step just built is a steady decode
	// step: every running request decodes one token, nothing was
	// preempted, and the next step, unless a request arrives or
	// completes, is the same batch one token further.
	steady(w *worker) bool
	// decodeStep builds the next step of a steady worker as build would,
	// or reports false, leaving state from which build continues
	// identically. An engine without a faster path returns false.
	decodeStep(w *worker, now trace.Time) bool
	// steadyAlloc allocates, at step j of fast-forward's inner loop
	// (steadySteps: the requests' computed counts stay as they were
	// when it started), what each running request's next decode token
	// needs, and returns the next step at which it must be called
	// again (j+1: every step). It reports false when the step cannot
	// be allocated here (build must evict, preempt or retract); the
	// requests before the one that failed may keep what they were given
	// for step j, as decodeStep leaves them.
	steadyAlloc(w *worker, j int64) (next int64, ok bool)
	// steadyStart returns the first step of steadySteps at which
	// steadyAlloc must be called.
	steadyStart(w *worker) int64
	// stepEnded is called when a step ends, after its tokens are
	// emitted and before finished requests leave.
	stepEnded(w *worker)
	// leave releases what r holds as it leaves w: at the end of the step
	// in flight (finished, or aborted during the step), between steps
	// (running, aborted by its client), or from the waiting queue.
	leave(w *worker, r *reqState, from leaving)
	// freeBlocks is the KV capacity free for new requests, in blocks of
	// SchedulerConfig.BlockSize tokens (what a load-aware router sees).
	freeBlocks() int64
	// evictions is the cached KV reused for other content, in blocks.
	evictions() int64
	// describe sets the KV fields of a Step for observers.
	describe(st *Step)
}

// leaving says when a request leaves its worker (scheduler.leave).
type leaving int

const (
	leaveAtStepEnd leaving = iota // finished, or aborted during the step that just ended
	leaveRunning                  // aborted between steps while running
	leaveWaiting                  // aborted while waiting
)

// A schedulerSpec is one engine's entry in the schedulers table.
type schedulerSpec struct {
	// name is SchedulerConfig.Engine's value for the engine.
	name string
	// defaults fills the zero values of the engine's own settings in s,
	// whose shared fields (BlockSize, KVCacheTokens, ...) are already
	// set: what the effective configuration records.
	defaults func(s *SchedulerConfig)
	// validate reports the engine's own settings that are out of range
	// (nil: none to check).
	validate func(s SchedulerConfig, bad func(field, format string, args ...any))
	// new returns one worker's scheduler over a KV cache of blocks
	// blocks of s.BlockSize tokens, s having its defaults.
	new func(s SchedulerConfig, blocks int64, t *testSwitches) scheduler
}

// schedulers lists the engines a worker can run, the default first: an
// explicit ordered table, as ingest's formats are, with no init().
var schedulers = []schedulerSpec{
	{name: EngineVLLM, defaults: vllmDefaults, new: newVLLM},
	{name: EngineSGLang, defaults: sglangDefaults, validate: sglangValidate, new: newSGLangScheduler},
}

// schedulerFor returns the table entry of engine ("": the default), or
// false.
func schedulerFor(engine string) (schedulerSpec, bool) {
	if engine == "" {
		return schedulers[0], true
	}
	for _, s := range schedulers {
		if s.name == engine {
			return s, true
		}
	}
	return schedulerSpec{}, false
}

// engineNames lists the engine names of the schedulers table.
func engineNames() []string {
	names := make([]string, len(schedulers))
	for i, s := range schedulers {
		names[i] = s.name
	}
	return names
}
