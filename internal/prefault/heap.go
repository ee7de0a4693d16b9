package prefault

import (
	"os"
	"runtime"
	"strings"
	"sync"
)

// HugeHeap has the Go runtime map n more bytes of heap at once, advised
// for transparent huge pages, so that the objects it places there later
// fault in 2 MiB at a time rather than 4 KiB. It allocates one object of
// n bytes, marks its memory MADV_HUGEPAGE and collects it (runtime.GC):
// the mapping and its advice stay, free, and the runtime places the
// objects allocated next at the lowest free addresses, there first. It
// acts once per process (later calls return at once) and only where the
// kernel takes the advice (Linux with transparent huge pages not
// "never").
//
// Note: Populate and MakeHuge map the large slices a program writes, but
// the heap's other objects (records, strings, hash ids, the runtime's
// spans of small objects) still faulted in page by page: on the 4-worker
// Mooncake replay, 7,300 faults on the heap's addresses (perf record -e
// page-faults -d), 22,000 minor faults in all (getrusage), at 12–43 µs
// each on the shared VM. After HugeHeap(256 MiB) the command takes some
// 2,500. The price: memory the runtime has used once it clears itself
// before reusing it (the heap's pages past the object are no longer
// fresh from the kernel), and a 2 MiB page is resident whole as soon as
// any of it is written, so the peak RSS grows (154 → 190 MiB there).
func HugeHeap(n int) {
	hugeHeap.Do(func() {
		if !hugePagesAdvised() {
			return
		}
		adviseHuge(MakeHuge[byte](n))
		runtime.GC() // frees the object: its pages are the heap's next
	})
}

var hugeHeap sync.Once

// hugePagesAdvised reports whether the kernel backs memory advised
// MADV_HUGEPAGE with transparent huge pages: its setting is "always" or
// "madvise" (the selected one is in brackets).
func hugePagesAdvised() bool {
	b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	return err == nil && (strings.Contains(string(b), "[madvise]") || strings.Contains(string(b), "[always]"))
}
