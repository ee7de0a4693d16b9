package termsafe

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// String returns s with every unsafe rune (see Unsafe) written as its Go
// escape, and every invalid UTF-8 byte as \xNN. Safe strings are returned
// as they are, without allocating.
func String(s string) string {
	if !needs(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b.WriteString(`\x`)
			b.WriteString(strconv.FormatUint(uint64(s[i])|0x100, 16)[1:])
		case Unsafe(r):
			q := strconv.QuoteRuneToASCII(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// Text is String for multi-line text: newlines and tabs stay as they are.
func Text(s string) string {
	if !needs(s) {
		return s
	}
	var b strings.Builder
	for i, line := range strings.Split(s, "\n") {
		if i > 0 {
			b.WriteByte('\n')
		}
		for j, field := range strings.Split(line, "\t") {
			if j > 0 {
				b.WriteByte('\t')
			}
			b.WriteString(String(field))
		}
	}
	return b.String()
}

// Unsafe reports whether r must not reach a terminal as it is: C0 controls
// (tab and newline included, since a label is one line), DEL, C1 controls,
// and the Unicode bidirectional controls.
func Unsafe(r rune) bool {
	switch {
	case r < 0x20, r == 0x7f, r >= 0x80 && r < 0xa0:
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x200e, r == 0x200f, r == 0x061c:
		return true
	}
	return false
}

func needs(s string) bool {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && size == 1) || Unsafe(r) {
			return true
		}
		i += size
	}
	return false
}
