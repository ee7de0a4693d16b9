package human

import (
	"fmt"
	"strings"
)

// Plural says n things: "1 run", "3 runs" (one: the thing's name; the
// plural adds an s).
func Plural(n int, one string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %ss", n, one)
}

// FirstOf names the first k of names, and how many more there are:
// "a, b, c and 4 more".
func FirstOf(names []string, k int) string {
	if len(names) <= k {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:k], ", ") + fmt.Sprintf(" and %d more", len(names)-k)
}

// NaturalCompare orders names as a person does: the runs of digits in
// them by their value (w2 before w10), the rest byte by byte, and names
// that compare equal so (w02, w2) byte by byte.
func NaturalCompare(a, b string) int {
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		if isDigit(a[i]) && isDigit(b[j]) {
			ei, ej := digitsEnd(a, i), digitsEnd(b, j)
			// Leading zeros do not count toward the value.
			x, y := strings.TrimLeft(a[i:ei], "0"), strings.TrimLeft(b[j:ej], "0")
			if c := len(x) - len(y); c != 0 {
				return c
			}
			if c := strings.Compare(x, y); c != 0 {
				return c
			}
			i, j = ei, ej
			continue
		}
		if a[i] != b[j] {
			return int(a[i]) - int(b[j])
		}
		i, j = i+1, j+1
	}
	if c := (len(a) - i) - (len(b) - j); c != 0 {
		return c
	}
	return strings.Compare(a, b)
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// digitsEnd returns the end of the run of digits at s[i].
func digitsEnd(s string, i int) int {
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	return i
}
