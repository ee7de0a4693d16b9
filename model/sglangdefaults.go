package model

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
)

// SGLangDefaults is what SGLang's server_args.py chooses for the server
// arguments a launch line left out that depend on the GPU, the parallel
// sizes and the version, and why.
type SGLangDefaults struct {
	// MemFractionStatic is --mem-fraction-static: the share of each GPU's
	// memory for the weights and the KV pool (SGLangKVCacheTokens).
	MemFractionStatic float64
	// ChunkedPrefillSize is --chunked-prefill-size.
	ChunkedPrefillSize int64
	// CUDAGraphMaxBS is the largest decode batch replayed as a CUDA
	// graph: --cuda-graph-max-bs, or where server_args leaves it unset
	// the largest size of cuda_graph_runner's default capture list.
	CUDAGraphMaxBS int
	// TorchCompileMaxBS is --torch-compile-max-bs: the largest decode
	// batch replayed as a torch-compiled CUDA graph when the launch line
	// has --enable-torch-compile. 32 in every release from v0.3.0 (a
	// fixed list up to 32 there; max_torch_compile_bs in v0.3.2–v0.3.4)
	// to v0.5.5 (server_args.py).
	TorchCompileMaxBS int
	// SchedulePolicy is --schedule-policy (lpm or fcfs).
	SchedulePolicy string
	// Version is the version whose rule chose them: the one given, or
	// the one assumed (SGLangDefaultVersion when none was given).
	Version string
	// Why says which rule chose them, for a derivation line.
	Why string
}

// SGLangDefaultVersion is the SGLang version whose defaults a run that
// records no version is given: v0.4.0.post1, the version the replay's
// SGLang scheduler was read from (the DataCrunch runs' December 2024
// image), so that what is assumed of the defaults agrees with what is
// modelled of the scheduler.
const SGLangDefaultVersion = "0.4.0.post1"

// An sglangVersion is a release number ordered as PEP 440 orders them:
// major, minor, patch, then dev (−2) < rc (−1) < release (0) < post (1),
// then the number of the dev, rc or post release.
type sglangVersion [5]int

// sglangVersionRE matches the release numbers SGLang uses: "0.4.0.post1",
// "0.5.3rc0", "0.5.2.dev12", "0.5" (the local part after "+" cut off).
var sglangVersionRE = regexp.MustCompile(`^(\d+)\.(\d+)(?:\.(\d+))?(?:\.?(post|rc|dev)(\d*))?$`)

// parseSGLangVersion reads a version such as "v0.4.0.post1", "0.5.3rc0" or
// "0.5.2.dev12+g1a2b"; ok is false for anything else.
func parseSGLangVersion(s string) (v sglangVersion, ok bool) {
	s, _, _ = strings.Cut(strings.TrimPrefix(strings.TrimSpace(s), "v"), "+")
	m := sglangVersionRE.FindStringSubmatch(s)
	if m == nil {
		return v, false
	}
	for i, at := range map[int]int{1: 0, 2: 1, 3: 2, 5: 4} {
		if m[i] == "" {
			continue
		}
		n, err := strconv.Atoi(m[i])
		if err != nil {
			return v, false
		}
		v[at] = n
	}
	v[3] = map[string]int{"post": 1, "rc": -1, "dev": -2}[m[4]]
	return v, true
}

// before reports whether v is an earlier release than w.
func (v sglangVersion) before(w sglangVersion) bool {
	for i := range v {
		if v[i] != w[i] {
			return v[i] < w[i]
		}
	}
	return false
}

// SGLangOverlapByDefault reports whether SGLang's version runs the overlap
// scheduler unless told not to: from v0.4 (December 2024:
// --disable-overlap-schedule; before, --enable-overlap-schedule, off by
// default). A version that is not given or not understood is taken as
// v0.4 or later, as SGLangServeDefaults then assumes
// SGLangDefaultVersion.
func SGLangOverlapByDefault(version string) bool {
	v, ok := parseSGLangVersion(version)
	return !ok || v[0] > 0 || v[1] >= 4
}

// mustSGLangVersion is parseSGLangVersion for the constants below.
func mustSGLangVersion(s string) sglangVersion {
	v, ok := parseSGLangVersion(s)
	if !ok {
		panic("model: bad SGLang version " + s)
	}
	return v
}

// The releases from which SGLang's defaults changed, with the commits of
// sgl-project/sglang that changed them (read with git log and git show on
// python/sglang/srt/server_args.py and model_executor/cuda_graph_runner.py
// at each release tag).
var (
	// v0.4.0 (f8b03269, 2024-12-04): #2044 and #2268 chose by GPU memory:
	// chunked_prefill_size 2048 and cuda_graph_max_bs 8 under 25,000
	// MiB, else 8192 and 160; mem_fraction_static by TP; lpm.
	sgV040 = mustSGLangVersion("0.4.0")
	// v0.4.0.post1 (e5f227c0): #2360, cuda_graph_max_bs 80 from TP4
	// under 25,000 MiB.
	sgV040p1 = mustSGLangVersion("0.4.0.post1")
	// v0.4.3.post3 (#3988, ac238727, 2025-03-03): schedule_policy fcfs.
	sgV043p3 = mustSGLangVersion("0.4.3.post3")
	// v0.4.5.post3 (#5604, e69a2190, 2025-04-22): above 81,920 MiB
	// mem_fraction_static leaves 13 GiB, and cuda_graph_max_bs is no
	// longer set above 25,000 MiB: the capture list goes to 256 above
	// 81,920 MiB (#4908), else to 160.
	sgV045p3 = mustSGLangVersion("0.4.5.post3")
	// v0.4.6.post2 (#5893, e4b6133b, 2025-04-30): 0.88 above 81,920 MiB,
	// raised above 96 GiB towards leaving 18 GiB; the TP table by
	// TP·PP; the capture list to 256 above 96 GiB.
	sgV046p2 = mustSGLangVersion("0.4.6.post2")
	// v0.4.7 (#6718, f2bd3515, 2025-05-29): above 180,000 MiB 0.79 and
	// chunked_prefill_size 16384; the capture list to 512 there.
	sgV047 = mustSGLangVersion("0.4.7")
	// v0.4.7.post1 (#7054, 6b12d6a8, 2025-06-10): mem_fraction_static
	// leaves a reserve by GPU memory and TP·PP; the 2048 and 8/80 rules
	// from 25,000 MiB to 35 GiB; 8192 to 160 GiB; the capture list to
	// 256 above 90 GiB and to 512 above 160,000 MiB. Unchanged in this
	// respect to v0.5.3rc0.
	sgV047p1 = mustSGLangVersion("0.4.7.post1")
	// v0.5.3 (#10372, 05a35266, 2025-09-26, and #10975, a17e70f5,
	// 2025-09-29): chunked_prefill_size and cuda_graph_max_bs from a
	// table by GPU memory and TP, and the reserve from them.
	sgV053 = mustSGLangVersion("0.5.3")
	// v0.5.5 (read at the tag): cuda_graph_max_bs 24, not 16, below TP4
	// on a GPU of 20 to 35 GiB.
	sgV055 = mustSGLangVersion("0.5.5")
	// v0.5.10 (#16331, c64274c7, 2026-03-02): piecewise CUDA graphs on
	// by default, whose reserve (8 MiB per captured token count) is not
	// modelled; v0.5.9's rule is assumed from there.
	sgV0510 = mustSGLangVersion("0.5.10")
)

// SGLangServeDefaults returns SGLang's defaults of mem_fraction_static,
// chunked_prefill_size, cuda_graph_max_bs, torch_compile_max_bs and
// schedule_policy for a
// server of the given version ("" when the run records none:
// SGLangDefaultVersion) on hw at tensor-parallel size tp and pipeline
// size pp, as server_args.py (__post_init__, from v0.5.3
// _handle_gpu_memory_settings) and cuda_graph_runner.py choose them for
// a plain launch on an NVIDIA GPU: no speculative decoding, DP attention,
// PD disaggregation or multimodal model, whose adjustments are not
// modelled. The GPU memory is hw.MemBytes in MiB, the driver's total, as
// get_device_memory_capacity reads it. max_running_requests has one rule
// in all these versions (min(KV pool / 2, request pool), the request pool
// min(max(pool / context length · 512, 2048), 4096): tp_worker.py at
// v0.4.0.post1 and v0.5.3, model_runner.py at v0.5.9), which the replay
// applies (replay's sgMaxRunning).
//
// Versions before v0.4.0 are given v0.4.0's rule and versions from
// v0.5.10 v0.5.9's, and Why says so, as it does when no version is
// recorded; an unreadable version is treated as none.
func SGLangServeDefaults(version string, hw Hardware, tp, pp int) SGLangDefaults {
	tp, pp = max(tp, 1), max(pp, 1)
	par := tp * pp
	mem := float64(hw.MemBytes) / (1 << 20) // MiB
	const gib = 1024.0                      // MiB

	given := strings.TrimPrefix(strings.TrimSpace(version), "v")
	v, ok := parseSGLangVersion(given)
	rule, assumed := "SGLang "+given+"'s", ""
	switch {
	case given == "":
		v = mustSGLangVersion(SGLangDefaultVersion)
		rule, assumed = "SGLang "+SGLangDefaultVersion+"'s", "; no version recorded: "+SGLangDefaultVersion+" assumed"
	case !ok:
		v = mustSGLangVersion(SGLangDefaultVersion)
		rule, assumed = "SGLang "+SGLangDefaultVersion+"'s", fmt.Sprintf("; version %q not understood: %s assumed", version, SGLangDefaultVersion)
	case v.before(sgV040):
		v = sgV040
		rule, assumed = "SGLang 0.4.0's", "; "+given+" predates v0.4, whose defaults are not modelled: 0.4.0's assumed"
	case !v.before(sgV0510):
		v = mustSGLangVersion("0.5.9")
		rule, assumed = "SGLang 0.5.9's", "; "+given+" reserves memory for piecewise CUDA graphs from v0.5.10, not modelled: 0.5.9's rule assumed"
	}
	d := SGLangDefaults{Version: strings.TrimSuffix(strings.TrimPrefix(rule, "SGLang "), "'s"), SchedulePolicy: "fcfs", TorchCompileMaxBS: 32}
	if v.before(sgV043p3) {
		d.SchedulePolicy = "lpm"
	}
	where := fmt.Sprintf("%s has %.0f MiB, TP%d", hw.Name, mem, tp)
	if pp > 1 {
		where += fmt.Sprintf(" PP%d", pp)
	}
	switch {
	case v.before(sgV047p1):
		d.MemFractionStatic = sglangTPFraction(tp)
		small := mem < 25_000
		d.ChunkedPrefillSize, d.CUDAGraphMaxBS = 8192, 160
		switch {
		case small && (tp < 4 || v.before(sgV040p1)):
			d.ChunkedPrefillSize, d.CUDAGraphMaxBS = 2048, 8
		case small:
			d.ChunkedPrefillSize, d.CUDAGraphMaxBS = 2048, 80
		}
		why := "mem_fraction_static by TP"
		switch {
		case !v.before(sgV047) && mem > 180_000:
			d.MemFractionStatic = 0.79
			why = "mem_fraction_static 0.79 above 180,000 MiB"
		case !v.before(sgV046p2) && mem > 81920:
			f := 0.88
			why = "mem_fraction_static 0.88 above 81,920 MiB"
			if mem > 96*gib {
				f = math.Min(f+48*gib*(1-f)/mem, (mem-18*gib)/mem)
				why += ", raised above 96 GiB"
			}
			d.MemFractionStatic = f
		case !v.before(sgV046p2):
			d.MemFractionStatic = sglangTPFraction(par)
			why = "mem_fraction_static by TP·PP"
		case !v.before(sgV045p3) && mem > 81920:
			d.MemFractionStatic = (mem - 13*gib) / mem
			why = "mem_fraction_static leaving 13 GiB above 81,920 MiB"
		}
		if !v.before(sgV047) && mem > 180_000 {
			d.ChunkedPrefillSize = 16384
		}
		if !small && !v.before(sgV045p3) {
			// cuda_graph_max_bs unset: the capture list's largest size.
			switch {
			case !v.before(sgV047) && mem > 180_000:
				d.CUDAGraphMaxBS = 512
			case !v.before(sgV046p2) && mem > 96*gib, v.before(sgV046p2) && mem > 81920:
				d.CUDAGraphMaxBS = 256
			}
		}
		d.Why = fmt.Sprintf("%s defaults (%s, chunked prefill and CUDA graphs by GPU memory): %s%s", rule, why, where, assumed)
		return d

	case v.before(sgV053):
		// #7054: a reserve for activations and CUDA graphs.
		var reserve float64
		switch {
		case mem < 35*gib:
			reserve = (2.8 + float64(par)/10) * gib
			d.ChunkedPrefillSize, d.CUDAGraphMaxBS = 2048, 8
			if tp >= 4 {
				d.CUDAGraphMaxBS = 80
			}
		case mem < 90*gib:
			reserve = (9.5 + float64(par)/2) * gib
			d.ChunkedPrefillSize, d.CUDAGraphMaxBS = 8192, 160
		case mem < 160*gib:
			reserve = (12 + float64(par)/2) * gib
			d.ChunkedPrefillSize, d.CUDAGraphMaxBS = 8192, 256
		default:
			reserve = 32 * gib
			d.ChunkedPrefillSize, d.CUDAGraphMaxBS = 16384, 256
		}
		if mem > 160_000 {
			d.CUDAGraphMaxBS = 512
		}
		d.MemFractionStatic = roundTo(((mem - reserve) / mem), 3)
		d.Why = fmt.Sprintf("%s defaults (mem_fraction_static leaving %.0f MiB for activations and CUDA graphs): %s%s", rule, reserve, where, assumed)
		return d
	}
	// #10372 and #10975: the batch sizes from a table, the reserve from
	// them.
	switch {
	case mem < 20*gib:
		d.ChunkedPrefillSize, d.CUDAGraphMaxBS = 2048, 8
	case mem < 35*gib:
		d.ChunkedPrefillSize, d.CUDAGraphMaxBS = 2048, 80
		if tp < 4 {
			d.CUDAGraphMaxBS = 16
			if !v.before(sgV055) {
				d.CUDAGraphMaxBS = 24
			}
		}
	case mem < 60*gib:
		d.ChunkedPrefillSize, d.CUDAGraphMaxBS = 4096, 160
		if tp < 4 {
			d.CUDAGraphMaxBS = 32
		}
	case mem < 160*gib:
		d.ChunkedPrefillSize, d.CUDAGraphMaxBS = 8192, 512
		if tp < 4 {
			d.CUDAGraphMaxBS = 256
		}
	default:
		d.ChunkedPrefillSize, d.CUDAGraphMaxBS = 16384, 512
	}
	reserve := 512 + float64(max(d.ChunkedPrefillSize, 2048))*1.5 + float64(d.CUDAGraphMaxBS)*2 + float64(par)/8*gib
	if mem > 60*gib {
		reserve = math.Max(reserve, 10*gib)
	}
	d.MemFractionStatic = roundTo((mem-reserve)/mem, 3)
	d.Why = fmt.Sprintf("%s defaults (mem_fraction_static leaving %.0f MiB for activations of chunked_prefill_size %d and CUDA graphs to %d): %s%s",
		rule, reserve, d.ChunkedPrefillSize, d.CUDAGraphMaxBS, where, assumed)
	return d
}

// sglangTPFraction is SGLang's mem_fraction_static by parallel size from
// v0.4.0 (0.81 at 8; v0.3.6 had 0.82, v0.3.0 0.83).
func sglangTPFraction(n int) float64 {
	switch {
	case n >= 16:
		return 0.79
	case n >= 8:
		return 0.81
	case n >= 4:
		return 0.85
	case n >= 2:
		return 0.87
	}
	return 0.88
}

// roundTo is Python's round(x, digits) for the values here (no ties).
func roundTo(x float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}
