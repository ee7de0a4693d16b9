package analyze

import (
	"encoding/json"
	"math"
	"os"
	"slices"
	"testing"
)

// numpyVectors is testdata/numpy/vectors.json, written by gen.py there:
// vectors of 7, 8, 128, 129 and 1000 values (the edges of numpy's pairwise
// summation: a plain loop below 8, eight accumulators up to 128, halving
// above) and what numpy computed of them.
type numpyVectors struct {
	Numpy   string `json:"numpy"`
	Vectors []struct {
		Name        string    `json:"name"`
		Values      []float64 `json:"values"`
		Mean        float64   `json:"mean"`
		Std         float64   `json:"std"`
		Median      float64   `json:"median"`
		Percentiles []struct {
			P        float64 `json:"p"`
			Fraction float64 `json:"fraction"`
			Value    float64 `json:"value"`
		} `json:"percentiles"`
	} `json:"vectors"`
}

func readNumpyVectors(t *testing.T) numpyVectors {
	t.Helper()
	b, err := os.ReadFile("testdata/numpy/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var v numpyVectors
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Vectors) == 0 {
		t.Fatal("no vectors")
	}
	return v
}

// Dist's mean, population standard deviation, median and linear
// percentiles equal numpy's (np.mean, np.std, np.median, np.percentile)
// to the last bit, on vectors numpy computed, in a fresh clone (no
// ../shared). The vectors discriminate: on some, a left-to-right sum or a
// single interpolation formula would miss numpy's last bit, which the test
// checks too, so it cannot pass by a simpler definition.
func TestNumpyVectors(t *testing.T) {
	v := readNumpyVectors(t)
	naiveMeanDiffers, oneFormulaDiffers := false, false
	for _, vec := range v.Vectors {
		d := NewDist(slices.Clone(vec.Values))
		same := func(what string, got, want float64) {
			t.Helper()
			if math.Float64bits(got) != math.Float64bits(want) {
				t.Errorf("%s: %s %v (%#x), numpy %s %v (%#x)", vec.Name, what, got, math.Float64bits(got), v.Numpy, want, math.Float64bits(want))
			}
		}
		same("mean", d.Mean, vec.Mean)
		same("std", d.Std, vec.Std)
		same("median", d.Median(), vec.Median)
		below, above := 0, 0
		for _, p := range vec.Percentiles {
			same("p"+formatP(p.P), d.Percentile(p.P), p.Value)
			switch {
			case p.Fraction > 0 && p.Fraction < 0.5:
				below++
			case p.Fraction >= 0.5:
				above++
				h := float64(len(d.Values)-1) * (p.P / 100)
				i := int(h)
				a, b := d.Values[i], d.Values[i+1]
				if a+(b-a)*(h-math.Floor(h)) != p.Value {
					oneFormulaDiffers = true
				}
			}
		}
		if below == 0 || above == 0 {
			t.Errorf("%s: interpolation fractions below 0.5: %d, above: %d; the vectors want both", vec.Name, below, above)
		}
		naive := 0.0
		for _, x := range vec.Values {
			naive += x
		}
		if naive/float64(len(vec.Values)) != vec.Mean {
			naiveMeanDiffers = true
		}
	}
	if !naiveMeanDiffers {
		t.Error("a left-to-right mean matches numpy on every vector: they do not test pairwise summation")
	}
	if !oneFormulaDiffers {
		t.Error("a + (b−a)·t matches numpy on every fraction ≥ 0.5: the vectors do not test numpy's _lerp")
	}
}

func formatP(p float64) string {
	b, _ := json.Marshal(p)
	return string(b)
}
