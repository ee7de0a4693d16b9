package kvcache

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/opaltrace/opaltrace/model"
	"github.com/opaltrace/opaltrace/trace"
)

// A Fabric carries concurrent KV transfers over paths of shared links: a
// node's PCIe links (one per GPU and direction), its host memory, its
// NVMe and its NIC. A transfer first waits the sum of its path's link
// latencies, using no bandwidth, then moves its bytes at a rate that
// max-min fair sharing gives it: every link's bandwidth is split equally
// among the transfers crossing it, except that a transfer held back
// elsewhere (at a slower or busier link) leaves its unused share to the
// others (progressive filling). Alone, a transfer of n bytes takes
// model.PathTime: the latencies plus n over the slowest link's bandwidth.
// Transfers over one link alone share it equally (processor sharing).
//
// It is driven by the replay's event loop: Start adds a transfer, Next
// says when the fabric's state next changes, Advance moves the clock and
// returns what completed. Time is trace.Time (ns); bytes
// are float64, completion times are rounded to the nanosecond.
//
// Note: max-min fairness is the flow-level model of network and DMA
// sharing (each DMA engine or queue pair gets its turn on every link it
// crosses); with one link it is the equal split of Opal's AbstractDevice
// (opal-notes §1). Data forwarded as it arrives (cut-through in chunks) is
// why a transfer's rate is its bottleneck's, not the sum of per-hop times.
type Fabric struct {
	links   []fabricLink
	now     float64      // ns
	waiting []fabricFlow // in latency, by (ready, id)
	moving  []fabricFlow // receiving bandwidth, by id (kept in order)
	rated   bool         // moving's rates are current

	// paths holds the distinct paths transfers took, and pathID finds
	// one by its links (pathKey); a flow names its path by its place
	// here.
	//
	// Note: a flow that held its own path slice was a pointer the
	// runtime had to track each time the queues moved or cleared it,
	// besides an allocation per transfer; a replay has a few paths per
	// worker and hundreds of thousands of transfers.
	paths  []fabricPath
	pathID map[string]int32
	key    []byte // scratch of Start

	// scratch of rate, by link; used: the links moving transfers cross
	left  []float64
	count []int32
	used  []int32

	// Observe, when set, is told how fast each link carries data (bytes
	// per ns, indexed by link) over each interval [from, to) ns in which
	// the rates hold: a per-second sampler's link utilisation.
	Observe func(from, to float64, rates []float64)
	sum     []float64 // scratch of drain
}

// A Done is a completed transfer.
type Done struct {
	ID int64
	At trace.Time
}

type fabricLink struct {
	link  model.Link
	bw    float64 // bytes per ns
	moved float64 // bytes carried since the start
}

type fabricFlow struct {
	id        int64
	ready     float64 // ns when the latency ends
	remaining float64 // bytes
	rate      float64 // bytes per ns while moving
	path      int32   // in Fabric.paths
}

// A fabricPath is a valid path: its links, in the order given, and the
// sum of their latencies in that order (ns).
type fabricPath struct {
	links []int32
	lat   float64
}

// NewFabric returns a fabric without links at time 0.
func NewFabric() *Fabric { return &Fabric{} }

// AddLink adds a link and returns its index, for paths. Its bandwidth is
// l.Bandwidth; a caller that moves data in I/Os of a known size passes a
// link with model.Link.EffectiveBandwidth already applied.
func (f *Fabric) AddLink(l model.Link) (int, error) {
	if err := l.Validate(); err != nil {
		return 0, err
	}
	f.links = append(f.links, fabricLink{link: l, bw: l.Bandwidth / 1e9})
	return len(f.links) - 1, nil
}

// Link returns link i as added.
func (f *Fabric) Link(i int) model.Link { return f.links[i].link }

// Moved returns the bytes link i has carried since time 0, up to the
// fabric's clock: a per-second sampler takes differences for the link's
// utilisation.
func (f *Fabric) Moved(i int) float64 { return f.links[i].moved }

// Remaining returns the bytes transfer id has still to move as of the
// fabric's clock (Advance first), and false when it is not in flight.
func (f *Fabric) Remaining(id int64) (float64, bool) {
	for _, fl := range f.waiting {
		if fl.id == id {
			return fl.remaining, true
		}
	}
	for _, fl := range f.moving {
		if fl.id == id {
			return fl.remaining, true
		}
	}
	return 0, false
}

// Active is the number of transfers in flight (in latency or moving).
func (f *Fabric) Active() int { return len(f.waiting) + len(f.moving) }

// Start begins a transfer of n bytes over the links of path (indices from
// AddLink) at now, which must not be before the fabric's clock; ids must
// be unique among transfers in flight. It first advances the fabric to
// now and returns what completed by then, as Advance does. The path is
// copied.
func (f *Fabric) Start(now trace.Time, id int64, n int64, path []int) ([]Done, error) {
	return f.StartAfter(now, 0, id, n, path)
}

// StartAfter is Start for a transfer whose bytes are sent only after wait
// (and then the path's latency): one decided at now whose sender is busy
// until now+wait, as SGLang's prefetch, whose fetch follows its storage
// query. It is in flight from now (Active, Remaining: all n bytes left).
func (f *Fabric) StartAfter(now trace.Time, wait time.Duration, id int64, n int64, path []int) ([]Done, error) {
	if n < 0 || len(path) == 0 {
		return nil, fmt.Errorf("kvcache: transfer %d of %d bytes over %d links", id, n, len(path))
	}
	if wait < 0 {
		return nil, fmt.Errorf("kvcache: transfer %d waits %v", id, wait)
	}
	if float64(now) < f.now {
		return nil, fmt.Errorf("kvcache: transfer %d starts at %d ns, before the fabric's clock %.0f ns", id, now, f.now)
	}
	p, err := f.pathOf(path)
	if err != nil {
		return nil, fmt.Errorf("kvcache: transfer %d: %w", id, err)
	}
	done := f.Advance(now)
	fl := fabricFlow{id: id, ready: float64(now.Add(wait)) + f.paths[p].lat, remaining: float64(n), path: p}
	i, _ := slices.BinarySearchFunc(f.waiting, fl, cmpFlowReady)
	f.waiting = slices.Insert(f.waiting, i, fl)
	return done, nil
}

// pathOf returns the index in f.paths of path, adding it the first time.
// A path is valid once it is: links are only ever added.
func (f *Fabric) pathOf(path []int) (int32, error) {
	f.key = f.key[:0]
	for _, l := range path {
		f.key = binary.LittleEndian.AppendUint64(f.key, uint64(l))
	}
	if p, ok := f.pathID[string(f.key)]; ok {
		return p, nil
	}
	links := make([]int32, len(path))
	var lat float64
	for i, l := range path {
		if l < 0 || l >= len(f.links) || slices.Contains(links[:i], int32(l)) {
			// A copy: path itself must not escape, or every
			// caller's path is a heap allocation per transfer.
			return 0, fmt.Errorf("bad path %v", slices.Clone(path))
		}
		links[i] = int32(l)
		lat += float64(f.links[l].link.Latency)
	}
	if f.pathID == nil {
		f.pathID = map[string]int32{}
	}
	p := int32(len(f.paths))
	f.paths = append(f.paths, fabricPath{links: links, lat: lat})
	f.pathID[string(f.key)] = p
	return p, nil
}

func cmpFlowReady(a, b fabricFlow) int {
	if a.ready != b.ready {
		if a.ready < b.ready {
			return -1
		}
		return 1
	}
	return int(a.id - b.id)
}

// rate gives every moving transfer its max-min fair rate.
//
// Note: only the links some moving transfer crosses (used, ascending) are
// set up and scanned: a node has a pair of PCIe links per GPU, and a
// handful of transfers cross a few of them. Scanned in ascending order,
// with the same arithmetic in the same order, they give the rates a scan
// of every link gives, to the bit.
func (f *Fabric) rate() {
	if f.rated {
		return
	}
	f.rated = true
	if len(f.count) < len(f.links) {
		f.left = make([]float64, len(f.links))
		f.count = make([]int32, len(f.links))
	}
	// (count is all zero: every round below ends with each rated
	// transfer's links counted down.)
	f.used = f.used[:0]
	for i := range f.moving {
		f.moving[i].rate = -1
		for _, l := range f.paths[f.moving[i].path].links {
			if f.count[l] == 0 {
				f.left[l] = f.links[l].bw
				f.used = append(f.used, l)
			}
			f.count[l]++
		}
	}
	slices.Sort(f.used)
	for unrated := len(f.moving); unrated > 0; {
		// The link with the least bandwidth per unrated transfer
		// bottlenecks every unrated transfer crossing it.
		best, share := int32(-1), math.Inf(1)
		for _, l := range f.used {
			if c := f.count[l]; c > 0 && f.left[l]/float64(c) < share {
				best, share = l, f.left[l]/float64(c)
			}
		}
		for i := range f.moving {
			fl := &f.moving[i]
			if fl.rate >= 0 {
				continue
			}
			path := f.paths[fl.path].links
			if !slices.Contains(path, best) {
				continue
			}
			fl.rate = share
			unrated--
			for _, l := range path {
				f.left[l] = max(f.left[l]-share, 0)
				f.count[l]--
			}
		}
	}
}

// next is the time of the next state change, or +Inf.
func (f *Fabric) next() float64 {
	t := math.Inf(1)
	if len(f.waiting) > 0 {
		t = f.waiting[0].ready
	}
	f.rate()
	for _, fl := range f.moving {
		t = min(t, f.now+fl.remaining/fl.rate)
	}
	return t
}

// Next returns when the fabric's state next changes if no transfer starts
// before then, and false when it is idle.
func (f *Fabric) Next() (trace.Time, bool) {
	t := f.next()
	if math.IsInf(t, 1) {
		return 0, false
	}
	return trace.Time(math.Ceil(t)), true
}

// Advance moves the fabric's clock to to and returns the transfers that
// completed by then, in completion order (ties by id). An earlier to than
// the clock does nothing.
func (f *Fabric) Advance(to trace.Time) []Done { return f.AdvanceAppend(nil, to) }

// AdvanceAppend is Advance appending the completed transfers to done, so
// that a caller advancing the fabric at every transfer event can reuse
// one slice.
func (f *Fabric) AdvanceAppend(done []Done, to trace.Time) []Done {
	end := float64(to)
	for {
		t := f.next()
		if t > end {
			break
		}
		ended := f.drain(t)
		ready := 0
		for ready < len(f.waiting) && f.waiting[ready].ready <= t {
			// moving stays in id order.
			fl := f.waiting[ready]
			i, _ := slices.BinarySearchFunc(f.moving, fl.id, func(m fabricFlow, id int64) int { return cmp.Compare(m.id, id) })
			f.moving = slices.Insert(f.moving, i, fl)
			ended = ended || fl.remaining == 0 // (a transfer of no bytes)
			ready++
			f.rated = false
		}
		// Keep waiting's front, so that Start inserts without
		// reallocating.
		f.waiting = f.waiting[:copy(f.waiting, f.waiting[ready:])]
		if !ended {
			continue // no moving transfer has sent everything
		}
		kept := f.moving[:0]
		for _, fl := range f.moving {
			if fl.remaining == 0 {
				done = append(done, Done{ID: fl.id, At: trace.Time(math.Round(t))})
				f.rated = false
			} else {
				kept = append(kept, fl)
			}
		}
		clear(f.moving[len(kept):])
		f.moving = kept
	}
	if end > f.now {
		f.drain(end)
	}
	return done
}

// drain moves the clock to t, taking from each moving transfer the bytes
// its rate sent meanwhile and counting them on its links, and reports
// whether a transfer has sent everything. A transfer whose end, as next
// computes it, is not after t has sent everything: so the transfer that
// set t ends exactly then, however coarse float time is late in a long
// replay.
func (f *Fabric) drain(t float64) (ended bool) {
	if dt := t - f.now; dt >= 0 && len(f.moving) > 0 {
		f.rate()
		if f.Observe != nil && dt > 0 {
			f.sum = append(f.sum[:0], make([]float64, len(f.links))...)
			for _, fl := range f.moving {
				for _, l := range f.paths[fl.path].links {
					f.sum[l] += fl.rate
				}
			}
			f.Observe(f.now, t, f.sum)
		}
		for i := range f.moving {
			fl := &f.moving[i]
			sent := min(dt*fl.rate, fl.remaining)
			if f.now+fl.remaining/fl.rate <= t || fl.remaining-sent < 1e-6 {
				sent = fl.remaining
			}
			fl.remaining -= sent
			ended = ended || fl.remaining == 0
			for _, l := range f.paths[fl.path].links {
				f.links[l].moved += sent
			}
		}
	}
	f.now = max(f.now, t)
	return ended
}
