package main

import "fmt"

// countOf says n things: "1 run", "3 runs" (one: the thing's name; the
// plural adds an s).
func countOf(n int, one string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %ss", n, one)
}
