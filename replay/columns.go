package replay

import (
	"math"

	"github.com/opaltrace/opaltrace/internal/prefault"
	"github.com/opaltrace/opaltrace/trace"
)

// Columns is Inputs kept column by column: the fields of each request the
// replay reads (lengths, arrival, prefix hash ids, session and turn, think
// time, the worker that served it and, disaggregated, its prefill worker) and those its records copy (ids, run,
// stage, model, LoRA, position), and no others. Request builds a
// trace.Request from them on demand.
//
// Note: a trace.Request is about a kilobyte; a replay of a million-request
// trace held them all for as long as it ran. A row here is about 130
// bytes and its hash ids; the strings that repeat (run, stage, model,
// LoRA, session, file) are kept once. opaltrace replay of 1.2 million
// Mooncake-shaped requests from Parquet: peak RSS 3.4 GB -> 1.5 GB, the
// same output.
type Columns struct {
	strs  map[string]int32
	table []string

	id                  []string
	run, stage, model   []int32
	lora, session, file []int32
	worker, prefill     []int32 // Worker, PrefillWorker
	line                []int32
	in, out, block      []int64
	turn                []int64
	arrival             []trace.Time
	think               []float64
	has                 []uint8 // presence bits: has* below
	hashEnd             []int64 // end of each row's hash ids in hash
	hash                []int64
}

// Presence bits of Columns.has.
const (
	hasIn uint8 = 1 << iota
	hasOut
	hasBlock
	hasTurn
	hasArrival
	hasThink
	hasHashIDs // non-nil hash_ids (possibly empty)
)

// Len implements Inputs.
func (c *Columns) Len() int { return len(c.id) }

func (c *Columns) intern(s string) int32 {
	if c.strs == nil {
		c.strs = map[string]int32{}
	}
	i, ok := c.strs[s]
	if !ok {
		i = int32(len(c.table))
		c.strs[s] = i
		c.table = append(c.table, s)
	}
	return i
}

// Add appends r, copying what the replay needs; r may be reused after.
func (c *Columns) Add(r *trace.Request) {
	var has uint8
	opt := func(o trace.Opt[int64], bit uint8) int64 {
		if o.OK {
			has |= bit
		}
		return o.V
	}
	if len(c.id) == cap(c.id) {
		c.grow()
	}
	c.id = append(c.id, r.RequestID)
	c.run = append(c.run, c.intern(r.Run))
	c.stage = append(c.stage, c.intern(r.Stage))
	c.model = append(c.model, c.intern(r.Model))
	c.lora = append(c.lora, c.intern(r.LoRA))
	c.session = append(c.session, c.intern(r.Session))
	c.worker = append(c.worker, c.intern(r.Worker))
	c.prefill = append(c.prefill, c.intern(r.PrefillWorker))
	file, line := r.Pos()
	c.file = append(c.file, c.intern(file))
	c.line = append(c.line, int32(min(line, math.MaxInt32)))
	c.in = append(c.in, opt(r.InputTokens, hasIn))
	c.out = append(c.out, opt(r.OutputTokens, hasOut))
	c.block = append(c.block, opt(r.BlockSize, hasBlock))
	c.turn = append(c.turn, opt(r.Turn, hasTurn))
	if r.Arrival.OK {
		has |= hasArrival
	}
	c.arrival = append(c.arrival, r.Arrival.V)
	if r.ThinkSec.OK {
		has |= hasThink
	}
	c.think = append(c.think, r.ThinkSec.V)
	if r.HashIDs != nil {
		has |= hasHashIDs
	}
	c.hash = grow(c.hash, len(r.HashIDs))
	c.hash = append(c.hash, r.HashIDs...)
	c.hashEnd = append(c.hashEnd, int64(len(c.hash)))
	c.has = append(c.has, has)
}

// grow doubles the capacity of every per-row column (at least 256 rows).
//
// Note: append grows a large slice by a quarter at a time, so the columns
// of n rows had been allocated about five times over, each copy in fresh
// memory: reading the Mooncake trace's 12,031 requests allocated 17.7 MB
// for 4 MB of columns, 2,200 page faults (perf record -e page-faults).
// Doubling allocates each about twice.
func (c *Columns) grow() {
	n := max(len(c.id), 256)
	c.id = grow(c.id, n)
	c.run, c.stage, c.model = grow(c.run, n), grow(c.stage, n), grow(c.model, n)
	c.lora, c.session, c.file = grow(c.lora, n), grow(c.session, n), grow(c.file, n)
	c.worker, c.prefill, c.line = grow(c.worker, n), grow(c.prefill, n), grow(c.line, n)
	c.in, c.out, c.block, c.turn = grow(c.in, n), grow(c.out, n), grow(c.block, n), grow(c.turn, n)
	c.arrival, c.think = grow(c.arrival, n), grow(c.think, n)
	c.has, c.hashEnd = grow(c.has, n), grow(c.hashEnd, n)
}

// grow returns s with room for n more values, doubling its capacity when
// it has to grow, in memory that append has not cleared
// (prefault.Regrow): the kernel maps the part the copy writes at once and
// the room ahead (prefault.Async) while rows are appended.
func grow[T any](s []T, n int) []T {
	if cap(s)-len(s) >= n {
		return s
	}
	g := prefault.Regrow(s, len(s)+max(n, cap(s)), len(s))
	prefault.Async(prefault.Slice(g[len(g):cap(g)]))
	return g
}

// Arrivals reports whether any request has an arrival time.
func (c *Columns) Arrivals() bool {
	for _, h := range c.has {
		if h&hasArrival != 0 {
			return true
		}
	}
	return false
}

// Request implements Inputs: a new Request with the kept fields of the
// i-th added (its hash ids shared with c: they must not be changed).
func (c *Columns) Request(i int) *trace.Request {
	r := new(trace.Request)
	c.peek(i, r)
	return r
}

// peek implements peeker: it sets r to the i-th request, as Request
// builds it.
func (c *Columns) peek(i int, r *trace.Request) {
	h := c.has[i]
	opt := func(v int64, bit uint8) trace.Opt[int64] { return trace.Opt[int64]{V: v, OK: h&bit != 0} }
	*r = trace.Request{
		RequestID: c.id[i], Run: c.table[c.run[i]], Stage: c.table[c.stage[i]],
		Model: c.table[c.model[i]], LoRA: c.table[c.lora[i]], Session: c.table[c.session[i]],
		Worker: c.table[c.worker[i]], PrefillWorker: c.table[c.prefill[i]],
		InputTokens: opt(c.in[i], hasIn), OutputTokens: opt(c.out[i], hasOut),
		BlockSize: opt(c.block[i], hasBlock), Turn: opt(c.turn[i], hasTurn),
		Arrival:  trace.Opt[trace.Time]{V: c.arrival[i], OK: h&hasArrival != 0},
		ThinkSec: trace.Opt[float64]{V: c.think[i], OK: h&hasThink != 0},
	}
	if h&hasHashIDs != 0 {
		start := int64(0)
		if i > 0 {
			start = c.hashEnd[i-1]
		}
		r.HashIDs = c.hash[start:c.hashEnd[i]:c.hashEnd[i]]
	}
	r.SetPos(c.table[c.file[i]], int(c.line[i]))
}
