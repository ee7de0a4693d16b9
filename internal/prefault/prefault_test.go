package prefault

import (
	"bytes"
	"runtime"
	"syscall"
	"testing"
	"unsafe"
)

// TestPopulateKeepsContents: populating memory being written changes none
// of it, whether its pages were written before or not.
func TestPopulateKeepsContents(t *testing.T) {
	b := make([]byte, 3<<20+123)
	for i := 0; i < len(b); i += 4096 * 3 {
		b[i] = byte(i/4096) | 1
	}
	want := bytes.Clone(b)
	Populate(b[7:]) // an unaligned start
	Populate(b)
	if !bytes.Equal(b, want) {
		t.Fatal("Populate changed the memory")
	}
	Populate(nil)
	Populate(b[:0])
}

// TestPopulateFaultsIn: once a fresh mapping is populated, writing every
// page of it takes (next to) no page fault; without, one each.
func TestPopulateFaultsIn(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("Populate does nothing outside Linux")
	}
	const pages = 2048
	faults := func(populated bool) int64 {
		m, err := syscall.Mmap(-1, 0, pages*4096, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
		if err != nil {
			t.Fatal(err)
		}
		defer syscall.Munmap(m)
		if populated {
			if errno := populate(m); errno == syscall.EINVAL {
				t.Skip("the kernel has no MADV_POPULATE_WRITE (Linux before 5.14)")
			} else if errno != 0 {
				t.Fatal(errno)
			}
		}
		runtime.LockOSThread() // RUSAGE_THREAD counts this thread's faults
		defer runtime.UnlockOSThread()
		before := minorFaults(t)
		for i := 0; i < len(m); i += 4096 {
			m[i] = 1
		}
		return minorFaults(t) - before
	}
	if n := faults(false); n < pages/2 {
		t.Fatalf("writing %d fresh pages took %d faults: the test cannot see faults", pages, n)
	}
	if n := faults(true); n > pages/20 {
		t.Fatalf("writing %d populated pages took %d faults", pages, n)
	}
}

func minorFaults(t *testing.T) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru); err != nil {
		t.Fatal(err)
	}
	return ru.Minflt
}

// TestMakeHuge: a slice spanning a huge page starts at a huge page's
// boundary, has the length and capacity asked, and is zero; a smaller
// one is make's.
func TestMakeHuge(t *testing.T) {
	for _, n := range []int{0, 1, 1000, int(hugePageSize / 8), int(hugePageSize/8) + 3, 3 * int(hugePageSize) / 8} {
		s := MakeHuge[float64](n)
		if len(s) != n || cap(s) != n {
			t.Fatalf("MakeHuge(%d): len %d cap %d", n, len(s), cap(s))
		}
		for i, v := range s {
			if v != 0 {
				t.Fatalf("MakeHuge(%d)[%d] = %v", n, i, v)
			}
		}
		if n*8 >= int(hugePageSize) {
			if at := uintptr(unsafe.Pointer(unsafe.SliceData(s))); at%hugePageSize != 0 {
				t.Errorf("MakeHuge(%d) starts at %#x, not at a huge page", n, at)
			}
			Populate(Slice(s))
			s[n-1] = 1
		}
	}
	// Values whose size does not divide the boundary's distance stay
	// where make puts them.
	if s := MakeHuge[[3]byte](int(hugePageSize)); len(s) != int(hugePageSize) || cap(s) != int(hugePageSize) {
		t.Fatalf("MakeHuge of 3-byte values: len %d cap %d", len(s), cap(s))
	}
}

// TestRegrow: the copy keeps s's values and length at the capacity asked
// for, whatever part is mapped, and leaves s as it was.
func TestRegrow(t *testing.T) {
	s := []int64{1, 2, 3}
	for _, mapped := range []int{0, 3, 5, 1 << 20} {
		g := Regrow(s, 1<<20, mapped)
		if len(g) != 3 || cap(g) != 1<<20 || g[0] != 1 || g[2] != 3 {
			t.Errorf("mapped %d: len %d cap %d %v", mapped, len(g), cap(g), g[:3])
		}
		g[0] = 9
		if s[0] != 1 {
			t.Fatalf("mapped %d: s changed to %v", mapped, s)
		}
		if g[:4][3] != 0 {
			t.Errorf("mapped %d: room not zero", mapped)
		}
	}
}

// TestHugeHeap: once HugeHeap has mapped the heap ahead in huge pages, a
// large object allocated after it faults in 2 MiB at a time: writing
// every 4 KiB page of it takes a few faults, not one a page.
func TestHugeHeap(t *testing.T) {
	if runtime.GOOS != "linux" || !hugePagesAdvised() {
		t.Skip("no transparent huge pages to advise")
	}
	HugeHeap(64 << 20)
	HugeHeap(1 << 30)      // once a process: does nothing
	const pages = 4096     // 16 MiB
	runtime.LockOSThread() // RUSAGE_THREAD counts this thread's faults
	defer runtime.UnlockOSThread()
	before := minorFaults(t)
	b := make([]byte, pages*4096)
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	// Without HugeHeap every page faults. With it most of the object is in
	// huge pages, but where the kernel finds no free 2 MiB at the fault it
	// falls back to small ones (memory fragmented by other processes: 14
	// to 396 faults in five runs beside a running scripts/fidelity, 516 at
	// load 15, where the bound was an eighth of the pages), so the bound is
	// half the pages.
	n := minorFaults(t) - before
	t.Logf("%d faults writing %d pages", n, pages)
	if n > pages/2 {
		t.Fatalf("writing a %d-page object allocated after HugeHeap took %d faults", pages, n)
	}
}
