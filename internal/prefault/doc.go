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
package prefault
