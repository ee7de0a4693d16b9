// Package prefault has the kernel map memory a program is about to write,
// in one call, before the program's first writes would fault it in page
// by page.
//
// Note: a first write to a fresh page of anonymous memory is a page
// fault, and on the virtual machines these replays were measured on one
// cost 12–21 µs (a 64 MiB mapping written a byte per page: 21 µs per page;
// the same mapping through madvise(MADV_POPULATE_WRITE): 1.1 µs per page,
// /tmp/pft of the 2026-12-02 session). A 4-worker replay of the Mooncake
// trace took some 30,000 of them, a third of its CPU time. The kernel
// fills the same pages, zeroed, either way: populating them only skips
// the trap per page. Where the kernel has no MADV_POPULATE_WRITE (before
// Linux 5.14) or the system is not Linux, Populate does nothing and the
// pages fault in as before.
//
// Note: populating is that cheap only when the host already backs the
// guest's pages. When it does not (the shared VM under load, later the
// same day), MADV_POPULATE_WRITE took 20–43 µs per 4 KiB page, and
// writing page by page 43–58 µs; marking the range for transparent huge
// pages first (MADV_HUGEPAGE, which the machine's "madvise" setting of
// /sys/kernel/mm/transparent_hugepage/enabled honours) brought populating
// to 0.7–2 µs per 4 KiB, a 2 MiB page at a time. So Populate marks the
// whole huge pages inside what it maps, and MakeHuge places a large
// slice at a huge page's boundary so that all of it can be. Pages only
// partly inside stay small: a huge page is never mapped for memory the
// caller did not ask to populate.
//
// HugeHeap extends that to the heap's other objects: it has the runtime
// map a stretch of heap at once, advised for huge pages, before a command
// allocates into it.
package prefault
