package human

import (
	"math"
	"strconv"
	"strings"
)

// Count is n with a comma every three digits: 12031 → "12,031".
func Count(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// Fixed is v with two decimals: 298.3675805060193 → "298.37". NaN and
// infinities read "NaN", "+Inf", "-Inf".
func Fixed(v float64) string {
	switch {
	case math.IsNaN(v):
		return "NaN"
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// Seconds is a duration in seconds with two decimals and its unit:
// 298.3675805060193 → "298.37 s".
func Seconds(s float64) string { return Fixed(s) + " s" }

// Integer reports whether v holds a whole number (a count stored as a
// float), so that it prints without decimals.
func Integer(v float64) bool {
	return v == math.Trunc(v) && math.Abs(v) < 1<<53
}

// Number is v for a summary: an integer as one (48950 → "48950"), a
// magnitude of 1 or more with two decimals (298.3675805060193 →
// "298.37"), and a smaller one with three significant digits (0.00131842
// → "0.00132"), which two decimals would round to nothing.
func Number(v float64) string {
	a := math.Abs(v)
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0) || a >= 1 && !Integer(v):
		return Fixed(v)
	case Integer(v):
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	decimals := 2 - int(math.Floor(math.Log10(a)))
	return strconv.FormatFloat(v, 'f', decimals, 64)
}
