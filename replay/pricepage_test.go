package replay

import (
	"testing"
	"time"
)

// TestPricePagesApart: the price table pages cut from one block are whole
// pages, zero, each its own memory (writing all of one changes no other),
// across the blocks they are cut from.
func TestPricePagesApart(t *testing.T) {
	var e engine
	const n = 1 << tabPageBits
	var pages [][]time.Duration
	for i := range 3*pricePages + 5 {
		pg := e.pricePage()
		if len(pg) != n || cap(pg) != n {
			t.Fatalf("page %d: len %d cap %d, want %d", i, len(pg), cap(pg), n)
		}
		for j, d := range pg {
			if d != 0 {
				t.Fatalf("page %d fresh: price %d at %d", i, d, j)
			}
			pg[j] = time.Duration(1 + i*n + j)
		}
		pages = append(pages, pg)
	}
	for i, pg := range pages {
		for j, d := range pg {
			if d != time.Duration(1+i*n+j) {
				t.Fatalf("page %d, price %d: %d, want %d (overwritten)", i, j, d, 1+i*n+j)
			}
		}
	}
}
