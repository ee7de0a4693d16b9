package human

import "testing"

func TestNaturalCompare(t *testing.T) {
	sorted := []string{"", "0", "01", "1", "2", "10", "a", "a0", "a01", "a1", "a2", "a10", "a10b", "a10c", "a11", "b", "w2", "w10", "w100", "x1y2", "x1y10", "x2y1"}
	for i, a := range sorted {
		for j, b := range sorted {
			c := NaturalCompare(a, b)
			if (c < 0) != (i < j) || (c == 0) != (i == j) {
				t.Errorf("NaturalCompare(%q, %q) = %d, want the order of %d and %d", a, b, c, i, j)
			}
		}
	}
}

func TestPluralAndFirstOf(t *testing.T) {
	for _, c := range []struct {
		n    int
		want string
	}{{0, "0 runs"}, {1, "1 run"}, {2, "2 runs"}} {
		if got := Plural(c.n, "run"); got != c.want {
			t.Errorf("Plural(%d) = %q, want %q", c.n, got, c.want)
		}
	}
	names := []string{"a", "b", "c", "d", "e"}
	if got := FirstOf(names, 5); got != "a, b, c, d, e" {
		t.Errorf("FirstOf all: %q", got)
	}
	if got := FirstOf(names, 2); got != "a, b and 3 more" {
		t.Errorf("FirstOf 2: %q", got)
	}
}
