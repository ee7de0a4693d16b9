package trace

import (
	"sync"

	"github.com/klauspost/compress/zstd"

	"github.com/opaltrace/opaltrace/internal/prefault"
)

// Prewarm readies the ITL column's compressor for the next Writer made,
// on a goroutine of its own: a command calls it before reading its input,
// while the second core has nothing else to do, and the Writer's first
// list page then finds the compressor's history mapped.
//
// Note: zstd's encoder keeps a history as long as its window (8 MiB at
// the fastest level), allocated at its first frame over 128 KiB and
// written as far as the longest page compressed: 4 MiB of a list page,
// about 1,000 page faults in fresh memory on the 4-worker Mooncake
// replay, taken by the encoder's goroutine while the engine ran on the
// other core (perf record -e page-faults: 13 % of the command's). The
// history is the encoder's own (not reachable from here), so it is
// written by compressing a page of zeros, itself mapped in huge pages.
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
		zeros := prefault.MakeHuge[byte](dataPageSize)
		prefault.Populate(zeros)
		p.zenc.EncodeAll(zeros, make([]byte, 0, 64<<10))
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

// encoder returns the pager's compressor once Prewarm's goroutine, if
// any, is done with it.
func (p *pager) encoder() *zstd.Encoder {
	if p.ready != nil {
		<-p.ready
		p.ready = nil
	}
	return p.zenc
}
