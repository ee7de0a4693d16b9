package trace

import (
	"sync"

	"github.com/opaltrace/opaltrace/internal/prefault"
)

// Prewarm readies the ITL column's pager for the next Writer made, on a
// goroutine of its own: a command calls it before reading its input,
// while the second core has nothing else to do, and the Writer's list
// pages then find the compressor's history, the page body and the
// compressed body mapped, at a list page's full size.
//
// Note: zstd's encoder keeps a history as long as its window (8 MiB at
// the fastest level), allocated at its first frame over 128 KiB and
// written as far as the longest page compressed: 4 MiB of a list page,
// about 1,000 page faults in fresh memory on the 4-worker Mooncake
// replay, taken by the encoder's goroutine while the engine ran on the
// other core (perf record -e page-faults: 13 % of the command's). The
// history is the encoder's own (not reachable from here), so it is
// written by compressing a page of zeros: the page body itself, made at
// listPageBytes, into the compressed body, made at its bound.
//
// Note: the body and compressed body used to grow with the first row
// groups (Writer.shift), doubling from 256 KiB to 4.4 MiB each, in fresh
// memory populated at every step: 25 MB of the writer's 33 MB of buffers
// on the 4-worker Mooncake replay (growBytes counted), in the ITL
// column's goroutine, where mapping them (prefault.populate) was half of
// its samples (perf record -g), and a page of zeros apart.
func Prewarm() {
	warm.Lock()
	defer warm.Unlock()
	if warm.itl != nil {
		return // not yet taken
	}
	p := &pager{zenc: newFastZstd(), ready: make(chan struct{})}
	warm.itl = p
	go func() {
		defer close(p.ready)
		p.body = prefault.MakeHuge[byte](listPageBytes)
		prefault.Populate(p.body)
		p.z = p.zenc.EncodeAll(p.body, growBytes(nil, p.zenc.MaxEncodedSize(listPageBytes)))
	}()
}

// warm holds the pager Prewarm readies until a Writer takes it.
var warm struct {
	sync.Mutex
	itl *pager
}

// itlPager returns the ITL column's pager for a new Writer: Prewarm's,
// or a new one.
func itlPager() *pager {
	warm.Lock()
	defer warm.Unlock()
	p := warm.itl
	if p == nil {
		return &pager{zenc: newFastZstd()}
	}
	warm.itl = nil
	return p
}

// listPageBytes is the most a list page's body holds, but for rare
// pages of very many short lists: dataPageSize of values and their
// levels, a few bytes a row (encodeList).
const listPageBytes = dataPageSize + dataPageSize/8

// await waits until Prewarm's goroutine, if any, is done with the
// pager: a chunk calls it before it writes the pager's bodies
// (chunk.reset).
func (p *pager) await() {
	if p.ready != nil {
		<-p.ready
		p.ready = nil
	}
}
