package model

import (
	"strings"
	"testing"
)

// SGLang's defaults at the releases that changed them, on the GPUs of
// the measurements in ../shared/data, computed by hand from each
// release's server_args.py (A10: 23,028 MiB; H800: 81,559; H200:
// 143,771).
func TestSGLangServeDefaults(t *testing.T) {
	hw := func(name string) Hardware {
		h, err := ResolveHardware(name, nil)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	for _, c := range []struct {
		version, hw string
		tp          int
		frac        float64
		chunk       int64
		graphs      int
		policy, why string
	}{
		// The DataCrunch image: by TP, and the replay's long-standing
		// defaults on an H200.
		{"0.4.0.post1", "h200", 4, 0.85, 8192, 160, "lpm", "SGLang 0.4.0.post1's"},
		{"0.4.0.post1", "h200", 8, 0.81, 8192, 160, "lpm", "by TP"},
		{"", "h200", 4, 0.85, 8192, 160, "lpm", "no version recorded: 0.4.0.post1 assumed"},
		{"0.4.0.post1", "a10", 2, 0.87, 2048, 8, "lpm", "a10 has 23028 MiB, TP2"},
		{"0.4.0.post1", "a10", 4, 0.85, 2048, 80, "lpm", ""},
		{"0.4.0", "a10", 4, 0.85, 2048, 8, "lpm", "SGLang 0.4.0's"},
		{"0.3.6", "h100", 1, 0.88, 8192, 160, "lpm", "predates v0.4"},
		{"0.4.3.post3", "h100", 1, 0.88, 8192, 160, "fcfs", ""},
		// (143,771 − 13 GiB) / 143,771.
		{"0.4.5.post3", "h200", 8, (143771.0 - 13*1024) / 143771, 8192, 256, "fcfs", "leaving 13 GiB"},
		// min(0.88 + 48 GiB · 0.12 / 143,771, (143,771 − 18 GiB) / 143,771):
		// the second.
		{"0.4.6.post2", "h200", 8, (143771.0 - 18*1024) / 143771, 8192, 256, "fcfs", "raised above 96 GiB"},
		{"0.4.6.post2", "h800", 8, 0.81, 8192, 160, "fcfs", "by TP·PP"},
		// #7054: A10 TP2 leaves (2.8 + 0.2) GiB: round(19,956 / 23,028, 3).
		{"0.5.2", "a10", 2, 0.867, 2048, 8, "fcfs", "leaving 3072 MiB"},
		{"v0.5.1.post3", "a10", 2, 0.867, 2048, 8, "fcfs", "SGLang 0.5.1.post3's"},
		{"0.5.3rc0", "a10", 2, 0.867, 2048, 8, "fcfs", ""},
		// H800 TP8 leaves (9.5 + 4) GiB: round(67,735 / 81,559, 3).
		{"0.5.2", "h800", 8, 0.831, 8192, 160, "fcfs", "leaving 13824 MiB"},
		// H200 TP4 leaves (12 + 2) GiB.
		{"0.5.0rc0", "h200", 4, 0.9, 8192, 256, "fcfs", ""},
		// #10975: A10 TP2 leaves 512 + 3,072 + 32 + 256 MiB:
		// round(19,156 / 23,028, 3).
		{"0.5.3", "a10", 2, 0.832, 2048, 16, "fcfs", "leaving 3872 MiB"},
		{"0.5.5", "a10", 2, 0.831, 2048, 24, "fcfs", "CUDA graphs to 24"},
		// H800 TP8: 512 + 12,288 + 1,024 + 1,024 MiB: round(66,711 /
		// 81,559, 3).
		{"0.5.3", "h800", 8, 0.818, 8192, 512, "fcfs", "leaving 14848 MiB"},
		{"0.5.18", "h800", 8, 0.818, 8192, 512, "fcfs", "0.5.9's rule assumed"},
		{"nightly", "h200", 4, 0.85, 8192, 160, "lpm", `version "nightly" not understood`},
	} {
		d := SGLangServeDefaults(c.version, hw(c.hw), c.tp, 1)
		if !strings.HasPrefix(d.Why, "SGLang "+d.Version+"'s defaults (") {
			t.Errorf("%q: version %q, why %q", c.version, d.Version, d.Why)
		}
		// torch_compile_max_bs has one default in all these versions.
		if d.TorchCompileMaxBS != 32 {
			t.Errorf("%q on %s: torch_compile_max_bs %d, want 32", c.version, c.hw, d.TorchCompileMaxBS)
		}
		if d.MemFractionStatic != c.frac || d.ChunkedPrefillSize != c.chunk || d.CUDAGraphMaxBS != c.graphs || d.SchedulePolicy != c.policy || !strings.Contains(d.Why, c.why) {
			t.Errorf("%q on %s TP%d: %v, %d, %d, %s, %q; want %v, %d, %d, %s, %q", c.version, c.hw, c.tp,
				d.MemFractionStatic, d.ChunkedPrefillSize, d.CUDAGraphMaxBS, d.SchedulePolicy, d.Why, c.frac, c.chunk, c.graphs, c.policy, c.why)
		}
	}
}

func TestParseSGLangVersion(t *testing.T) {
	for s, want := range map[string]sglangVersion{
		"0.4.0.post1": {0, 4, 0, 1, 1}, "v0.5.2": {0, 5, 2, 0, 0}, "0.5.3rc0": {0, 5, 3, -1, 0},
		"0.5.2.dev12+g1a2b": {0, 5, 2, -2, 12}, "0.5": {0, 5, 0, 0, 0},
	} {
		if got, ok := parseSGLangVersion(s); !ok || got != want {
			t.Errorf("%q: %v %v, want %v", s, got, ok, want)
		}
	}
	for _, s := range []string{"", "dev", "0", "0.x", "0.5.2-foo"} {
		if _, ok := parseSGLangVersion(s); ok {
			t.Errorf("%q parsed", s)
		}
	}
	if !mustSGLangVersion("0.5.3rc0").before(sgV053) || !sgV053.before(mustSGLangVersion("0.5.3.post1")) || sgV043p3.before(mustSGLangVersion("0.4.3.post2")) {
		t.Error("release order")
	}
}
