package replay

import (
	"time"

	"github.com/opaltrace/opaltrace/internal/prefault"
	"github.com/opaltrace/opaltrace/model"
)

// A pricing prices the steps of the workers of one deployment: its step
// model, and the tables and pricers that price decode steps fast.
type pricing struct {
	cost model.StepModel
	tabs [maxTabN + 1][][]time.Duration // decode prices by batch size and context sum, in pages (decodePrice)
	one  [1]int64                       // scratch: a lone decode's batch
	// oneBatch is the lone decode's batch, one (decodePrice).
	oneBatch model.Batch
	// pricePages holds the fresh price table pages not handed out yet
	// (pricePage).
	pricePages []time.Duration
	// sum is the step model when it prices decode batches by their
	// contexts' sum (steadySteps); nil otherwise.
	sum model.DecodeSumModel
	// dec is the step model when it prices decode batches of one size
	// by their sum faster (model.DecodePricer), and pricers its pricers
	// by batch size, made when first asked (decodeTime); dec is nil
	// otherwise.
	dec     decodePricing
	pricers []*model.DecodePricer
	// noLoneMemo is testSwitches.noLoneMemo.
	noLoneMemo bool
}

// newPricing returns the pricing of cost's steps.
func newPricing(cost model.StepModel, noLoneMemo bool) pricing {
	p := pricing{cost: cost, noLoneMemo: noLoneMemo}
	if m, ok := cost.(model.DecodeSumModel); ok {
		if _, ok := m.DecodeStepTime(1, 0); ok {
			p.sum = m
		}
	}
	if m, ok := cost.(decodePricing); ok && p.sum != nil {
		if _, ok := m.DecodePricer(1); ok {
			p.dec = m
		}
	}
	return p
}

// pricingOf returns the pricing of worker w's steps: its pool's.
func (e *engine) pricingOf(w *worker) *pricing {
	if e.prefillPricing != nil && w.id < e.prefillSlots {
		return e.prefillPricing
	}
	return &e.pricing
}

// price returns the step model's time for batch b. The time of a lone
// decode is kept per context length, shared by the workers of one
// deployment (they have one model): at moderate load most steps are one
// request decoding, and the step model's contract (a pure function of
// the batch) makes the kept value exact. A lookup costs a few
// nanoseconds, a roofline step some 50. A batch of several decodes and no
// prefill is priced by their number and the sum of their contexts when
// the model can (pr.sum), as
// steadySteps prices the steps after it: DecodeStepTime is StepTime's
// price for any such batch (model.DecodeSumModel).
//
// Note: StepTime built every term of the batch, some 450 instructions a
// step plus a few a request, for the first step of every steady run and
// every step a waiting request could not be admitted at; on the
// autoscaled Mooncake replay, whose batches are larger, some 20,000
// steps of 2 to 60 decodes.
func (pr *pricing) price(b *model.Batch) time.Duration {
	if len(b.Prefill) != 0 || pr.noLoneMemo {
		return pr.cost.StepTime(b)
	}
	switch n := len(b.Decode); {
	case n == 1:
		return pr.decodePrice(1, b.Decode[0]).d
	case n > 1 && pr.sum != nil:
		var ctx int64
		for _, c := range b.Decode {
			ctx += c
		}
		return pr.decodePrice(n, ctx).d
	}
	return pr.cost.StepTime(b)
}

// A stepPrice is the price of a decode step, and the same in seconds (an
// ITL gap at stream interval 1).
type stepPrice struct {
	d time.Duration // 0: not yet asked
	s float64
}

// decodePrice returns the price of a step of n decodes whose contexts sum
// to ctx. Prices are kept in a table per batch size, indexed by the sum:
// a steady batch advances its sum by n a step, and across a replay the
// same sums recur, so after warming up a step costs a lookup. The table
// of lone decodes (n = 1) serves every step model; larger batches need
// the sum form (pr.sum), which prices a batch by its size and sum alone;
// batches above maxTabN are priced each time. A price not in a table is
// asked of the pricer of its batch size when the model has them
// (decodeTime), lone decodes' included.
//
// Note: a table is paged, its pages allocated when first used: a batch of
// 16 long requests sums to millions, but the sums a replay meets are a few
// ranges, and fresh memory costs a page fault per 4 KiB. Pages of 4,096
// prices of 16 bytes were 58 MB for a 4-worker Mooncake replay, at a
// tenth full for large batches (their sums advance by the batch size a
// step); pages of 512 durations (Seconds is a multiplication) were 16 MB,
// and tables up to batches of 4 (maxTabN) are 4.5 MB.
func (pr *pricing) decodePrice(n int, ctx int64) stepPrice {
	if n > maxTabN {
		d := pr.decodeTime(n, ctx)
		return stepPrice{d, stepSeconds(d)}
	}
	tab := &pr.tabs[n]
	pg, off := ctx>>tabPageBits, ctx&(1<<tabPageBits-1)
	if pg < int64(len(*tab)) && (*tab)[pg] != nil {
		if d := (*tab)[pg][off]; d != 0 {
			return stepPrice{d, stepSeconds(d)}
		}
	}
	var d time.Duration
	if n == 1 && pr.dec == nil {
		// The engine's batch: one made here escaped to the heap
		// through the interface, an allocation per price asked (and
		// some 270 of the 4-worker Mooncake replay's page faults).
		pr.one[0] = ctx
		pr.oneBatch = model.Batch{Decode: pr.one[:]}
		d = pr.cost.StepTime(&pr.oneBatch)
	} else {
		d = pr.decodeTime(n, ctx)
	}
	p := stepPrice{d, stepSeconds(d)}
	if pg < maxTabPages {
		if pg >= int64(len(*tab)) {
			*tab = append(*tab, make([][]time.Duration, pg+1-int64(len(*tab)))...)
		}
		if (*tab)[pg] == nil {
			(*tab)[pg] = pr.pricePage()
		}
		(*tab)[pg][off] = d
	}
	return p
}

// stepSeconds returns d.Seconds() for a step's time d.
//
// Note: Duration.Seconds divides d by 10⁹ twice as an integer, for the
// seconds and the rest, then adds their floats: 18 instructions, 59 M of
// BenchmarkReplayMooncakeRouters/round_robin's 3.6 M steps. Within a
// second of 0 (a step's time) the seconds are 0 and the sum is exactly
// float64(d)/1e9 (0 + x is x): one division.
func stepSeconds(d time.Duration) float64 {
	if d > -time.Second && d < time.Second {
		return float64(d) / 1e9
	}
	return d.Seconds()
}

// A priceCursor prices the steps of a steady batch of n decodes, whose
// context sum grows by n a step, as decodePrice does: it keeps the table
// page the last price came from, so that a step whose price is there
// costs an index (hit), and asks decodePrice for any other (ask).
//
// Note: decodePrice found the page again for every step, in a call each:
// 191 M instructions of BenchmarkReplayMooncakeRouters/round_robin's
// 3.6 M steps, where the cursor's hits and asks cost some 40 M.
type priceCursor struct {
	pricing *pricing // the worker's deployment's (engine.pricingOf)
	n       int
	page    []time.Duration // prices of the sums from base on (nil: none)
	base    int64
	pr      *model.DecodePricer // the pricing's pricer of n decodes, once asked (pricer)
}

// pricer returns the pricing's pricer of the cursor's n decodes.
func (c *priceCursor) pricer() *model.DecodePricer {
	if c.pr == nil {
		c.pr = c.pricing.pricer(c.n)
	}
	return c.pr
}

// hit returns the price of a step whose contexts sum to ctx when the
// page kept has it (ok), else ask.
//
// Note: it is small enough to be inlined in the step loops, which a
// method that also asked was not (a call, some 12 instructions a step).
func (c *priceCursor) hit(ctx int64) (p stepPrice, ok bool) {
	if i := uint64(ctx - c.base); i < uint64(len(c.page)) {
		if d := c.page[i]; uint64(d-1) < uint64(time.Second-1) {
			return stepPrice{d, float64(d) / 1e9}, true // stepSeconds: 0 < d < 1 s
		}
	}
	return stepPrice{}, false
}

// ask returns decodePrice's price for ctx, and keeps the page that holds
// it when there is one.
//
// Note: a miss in the page kept, and every step of a batch above maxTabN,
// is priced by the pricer of n decodes, as decodePrice would price it
// (decodeTime), without finding the table and the pricer again: decodePrice
// and decodeTime were some 120 of the 370 instructions a miss cost.
func (c *priceCursor) ask(ctx int64) stepPrice {
	if c.pricing.dec != nil {
		if i := uint64(ctx - c.base); i < uint64(len(c.page)) && c.page[i] == 0 {
			d := c.pricer().Price(ctx)
			c.page[i] = d
			return stepPrice{d, stepSeconds(d)}
		}
		if c.n > maxTabN {
			d := c.pricer().Price(ctx)
			return stepPrice{d, stepSeconds(d)}
		}
	}
	p := c.pricing.decodePrice(c.n, ctx)
	c.page = nil
	if c.n <= maxTabN {
		tab := c.pricing.tabs[c.n]
		if pg := ctx >> tabPageBits; pg < int64(len(tab)) {
			c.page, c.base = tab[pg], pg<<tabPageBits
		}
	}
	return p
}

// decodeTime returns the step model's time for a step of n decodes whose
// contexts sum to ctx (DecodeStepTime), through the pricer of batches of
// n when the model has them.
func (pr *pricing) decodeTime(n int, ctx int64) time.Duration {
	if pr.dec == nil {
		d, _ := pr.sum.DecodeStepTime(n, ctx)
		return d
	}
	return pr.pricer(n).Price(ctx)
}

// pricer returns the pricer of steps of n decodes (pr.dec must be set),
// made when first asked.
func (pr *pricing) pricer(n int) *model.DecodePricer {
	if n >= len(pr.pricers) {
		pr.pricers = append(pr.pricers, make([]*model.DecodePricer, n+1-len(pr.pricers))...)
	}
	p := pr.pricers[n]
	if p == nil {
		p, _ = pr.dec.DecodePricer(n) // it declines no n ≥ 1 once it took 1 (RunInputs)
		pr.pricers[n] = p
	}
	return p
}

// A decodePricing step model prices steps of n decodes by their
// contexts' sum through a pricer per n (model.Deployment.DecodePricer),
// as DecodeStepTime prices them.
type decodePricing interface {
	DecodePricer(n int) (*model.DecodePricer, bool)
}

// pricePage returns a fresh page for a price table, cut from a block of
// pricePages the kernel maps in one madvise (prefault.Populate).
//
// Note: a page made on its own is written at once (decodePrice), a page
// fault each: some 700 of the 4-worker Mooncake replay's page faults (perf
// record -e page-faults). A block left unused at the end maps at most
// pricePages−1 pages for nothing, some 1 µs each.
func (pr *pricing) pricePage() []time.Duration {
	const n = 1 << tabPageBits
	if len(pr.pricePages) < n {
		pr.pricePages = make([]time.Duration, pricePages*n)
		prefault.Populate(prefault.Slice(pr.pricePages))
	}
	pg := pr.pricePages[:n:n]
	pr.pricePages = pr.pricePages[n:]
	return pg
}

// pricePages is the number of price table pages mapped at once.
const pricePages = 32

// Price table pages hold 512 context sums (4 KiB); sums below 2^24 are
// kept.
const (
	tabPageBits = 9
	maxTabPages = 1 << (24 - tabPageBits)
)

// maxTabN is the largest batch size with a price table.
//
// Note: a table pays when its pages are looked up often: a page costs a
// page fault and 4 KiB zeroed, some 1–4 µs, a hit saves a step model's
// pricing, some 50 ns. Larger batches are rarer and their sums spread
// further, so their pages are hit less: on the 12,031 Mooncake requests
// (4 workers, h100, llama-3.1-8b) lookups hit 594 times a page for lone
// decodes, 353 for 2, 162 for 3, 79 for 4, then 30, 11, 5, 2 for 5 to 8
// and one or none above; on 16 workers 8,700, 392, 8 and 2 for 1 to 4.
// Tables up to 16 took 6,237 pages (25 MB) on 4 workers, up to 4 1,113.
const maxTabN = 4
