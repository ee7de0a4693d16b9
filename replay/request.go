package replay

import (
	"time"

	"github.com/opaltrace/opaltrace/replay/kvcache"
	"github.com/opaltrace/opaltrace/trace"
)

// A reqState is the engine's private working state of one request while
// it is in flight; the observed input stays untouched. It is recycled
// after the request completes, so memory grows with the requests in
// flight, not with the trace.
type reqState struct {
	in       *trace.Request
	idx      int32 // position in the input slice
	worker   int32
	prompt   int64 // prompt tokens
	maxOut   int64 // tokens to generate
	out      int64 // tokens generated so far
	computed int64 // tokens whose KV is computed or being computed this step

	blocks []int32 // block table
	ghost  []int32 // block table at the first preemption: where r's private blocks may still be
	shared int     // leading HashIDs another request also has (kvcache.BlockHasher.SharedIDs)
	hashed int64   // leading blocks of blocks whose hashes are committed
	// chain holds r's block hashes, each computed once (hashChain);
	// chainBS is its block size in tokens (0: not made yet).
	chain   kvcache.Chain
	chainBS int64
	sg      sgReq // SGLang worker's state (sglang.go)

	// KV offloading (offload.go); untouched without tiers.
	tierKeys  []uint64        // keys of the prompt's full tier blocks, once computed
	stored    int64           // leading tier blocks offered to the tiers
	loadFrom  []int8          // tier of each block of the load being started
	loadLeft  int             // transfers of its load in flight
	loadTo    int64           // computed tokens once its load completes
	holding   bool            // its load completed: it holds its blocks while waiting
	tierHit   [numTiers]int64 // prompt tokens loaded from each tier before its first schedule
	kvWait    time.Duration   // time spent waiting for loads before its first schedule
	kvStall   time.Duration   // of which in its steps, waiting for their loads (HiCache)
	loadStart trace.Time
	loadEnd   trace.Time
	pf        *hiPrefetch   // SGLang HiCache: its L3 prefetch in flight (hicache.go)
	pfTok     int64         // tokens its prefetch brought into L2
	pfTier    int8          // the tier they came from
	pfIO      time.Duration // how long its prefetch ran

	deadline  trace.Time // when the server learns the client gave up; never without a timeout
	aborted   bool       // timed out during a step: leaves when the step ends
	scheduled bool       // has been scheduled at least once
	// Disaggregated replays (disagg.go): pdOut, while r is on its
	// prefill worker, is the output it asked for (maxOut is 1 there);
	// remote says it waits in its decode worker's queue, its prompt's
	// KV computed by a prefill worker (worker.remote).
	pdOut  int64
	remote bool
	// pdWait: r waits in its vLLM decode worker's queue for the blocks
	// its KV load needs (disagg.awaitBlocks), since pdQueued.
	pdWait   bool
	pdQueued trace.Time
	// pdEnd is when its KV transfer to its decode worker ends, pdKV its
	// wait for it (engine.startTransfer): apart from loadEnd and kvWait,
	// a KV tier's load on its prefill worker.
	pdEnd trace.Time
	pdKV  time.Duration
	// pdPrefilled is when its prefill worker, slot pdFrom, computed its
	// prompt (its one token there: engine.prefilled), once prefilledPD.
	pdPrefilled trace.Time
	pdFrom      int32
	prefilledPD bool
	// SGLang: pdPre, r waits for its decode server to pre-allocate its
	// prompt's tokens, its prefill server holding it back (its bootstrap
	// queue); pdHeld, they are allocated there.
	pdPre, pdHeld bool
	cached        int64   // prefix-hit tokens at the first schedule
	score         float64 // the router's score of its worker, when scored
	scored        bool
	preemptions   int64

	// sent is when the client sent the request; arrival when it reached
	// the router (sent + client latency).
	sent, arrival, workerArrival, gpuStart, firstTok, lastTok trace.Time
	// engineQueued is when the engine's loop first saw r: the first
	// scheduling pass on its worker at or after workerArrival (see
	// worker.unseen), where vLLM stamps queued_ts and SGLang starts its
	// queue time.
	engineQueued trace.Time
	lastChunk    trace.Time // when the server sent the last chunk
	itl          []float64  // gaps between chunks

	// inBuf is in, when the inputs build requests on demand (Columns):
	// the state, recycled, keeps its memory for the next request.
	inBuf trace.Request
}

// hashChain returns the hashes of r's engine blocks of bs tokens
// (blockHasher), each computed once while r is in flight however often it
// is asked for: a scheduler looks r's prefix up at every step that fails
// to admit it, and again after each preemption. Anything that needs r's
// engine block hashes (a scheduler, a router scoring a worker's cache by
// vLLM-style block hashes) should ask it rather than hash again; asking
// with another block size starts the chain over.
func (r *reqState) hashChain(bs int64) *kvcache.Chain {
	if r.chainBS != bs {
		r.chain.Reset(blockHasher(r, bs))
		r.chainBS = bs
	}
	return &r.chain
}

// wants is the output r asked for, on a prefill worker too.
func (r *reqState) wants() int64 {
	if r.pdOut > 0 {
		return r.pdOut
	}
	return r.maxOut
}

// numTokens is the sequence length so far: the prompt and every generated
// token (the last one not yet in KV).
func (r *reqState) numTokens() int64 { return r.prompt + r.out }

// A deque is a FIFO of requests that can also push at the front (for
// preempted requests), as a ring buffer so that steady use allocates
// nothing.
type deque struct {
	buf        []*reqState
	head, size int
}

func (d *deque) Len() int { return d.size }

func (d *deque) grow() {
	n := max(2*len(d.buf), 16)
	buf := make([]*reqState, n)
	for i := range d.size {
		buf[i] = d.buf[(d.head+i)%len(d.buf)]
	}
	d.buf, d.head = buf, 0
}

func (d *deque) pushBack(r *reqState) {
	if d.size == len(d.buf) {
		d.grow()
	}
	d.buf[(d.head+d.size)%len(d.buf)] = r
	d.size++
}

func (d *deque) pushFront(r *reqState) {
	if d.size == len(d.buf) {
		d.grow()
	}
	d.head = (d.head - 1 + len(d.buf)) % len(d.buf)
	d.buf[d.head] = r
	d.size++
}

func (d *deque) front() *reqState { return d.buf[d.head] }

// remove takes r out of the queue, keeping the others' order, and reports
// whether it was there.
func (d *deque) remove(r *reqState) bool {
	for i := range d.size {
		if d.buf[(d.head+i)%len(d.buf)] != r {
			continue
		}
		for j := i; j > 0; j-- {
			d.buf[(d.head+j)%len(d.buf)] = d.buf[(d.head+j-1)%len(d.buf)]
		}
		d.popFront()
		return true
	}
	return false
}

// each calls f for every queued request, front first.
func (d *deque) each(f func(*reqState)) {
	for i := range d.size {
		f(d.buf[(d.head+i)%len(d.buf)])
	}
}

func (d *deque) popFront() *reqState {
	r := d.buf[d.head]
	d.buf[d.head] = nil
	d.head = (d.head + 1) % len(d.buf)
	d.size--
	return r
}
