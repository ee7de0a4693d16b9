package human

import (
	"math"
	"testing"
)

func TestCount(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 7: "7", 999: "999", 1000: "1,000", 12031: "12,031",
		1000000: "1,000,000", -1234567: "-1,234,567", math.MaxInt64: "9,223,372,036,854,775,807"} {
		if got := Count(n); got != want {
			t.Errorf("Count(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestFixedAndSeconds(t *testing.T) {
	if got := Seconds(298.3675805060193); got != "298.37 s" {
		t.Errorf("Seconds = %q", got)
	}
	for v, want := range map[float64]string{0: "0.00", 1.005: "1.00", -2.5: "-2.50", math.Inf(1): "+Inf", math.Inf(-1): "-Inf"} {
		if got := Fixed(v); got != want {
			t.Errorf("Fixed(%v) = %q, want %q", v, got, want)
		}
	}
	if got := Fixed(math.NaN()); got != "NaN" {
		t.Errorf("Fixed(NaN) = %q", got)
	}
}

func TestInteger(t *testing.T) {
	for v, want := range map[float64]bool{48950: true, 0: true, 1.5: false, 1e300: false, -3: true} {
		if got := Integer(v); got != want {
			t.Errorf("Integer(%v) = %v, want %v", v, got, want)
		}
	}
	if Integer(math.NaN()) || Integer(math.Inf(1)) {
		t.Error("NaN or Inf counted as an integer")
	}
}

func TestNumber(t *testing.T) {
	for v, want := range map[float64]string{48950: "48950", 0: "0", 298.3675805060193: "298.37", 9.317789: "9.32",
		0.00131842: "0.00132", 0.5: "0.500", -0.0477: "-0.0477", 2320.722235: "2320.72", -3: "-3"} {
		if got := Number(v); got != want {
			t.Errorf("Number(%v) = %q, want %q", v, got, want)
		}
	}
	if got := Number(math.NaN()); got != "NaN" {
		t.Errorf("Number(NaN) = %q", got)
	}
}
