package calibrate

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/opaltrace/opaltrace/model"
)

// Link tiers: where the KV that a table's rows load comes from, and so
// which of a node's links the fit describes.
const (
	LinkHost   = "host"   // host DRAM over PCIe: pcie_gbps, pcie_latency_us
	LinkDisk   = "disk"   // local NVMe: nvme_gbps, nvme_latency_us
	LinkRemote = "remote" // a store or a peer over the NIC: network_gbps, network_latency_us
)

// A LinkPoint is one row of a link table for one tier: moving the KV of
// Tokens prompt tokens (Bytes, when the table gives them; else 0) took
// Seconds beyond computing with that KV already on the GPU.
type LinkPoint struct {
	Tier    string
	Line    int // of the table
	Tokens  int64
	Bytes   float64
	Seconds float64
}

// ParseLinkTable reads a single-request table of KV transfer times by
// prompt length, a CSV with a header line ('#' comments allowed) in
// either of two shapes:
//
//   - TTFT by tier, as LMCache's and the Mooncake docs' tables give it:
//     prompt_tokens, ttft_gpu_ms (the prefix already in GPU memory) and
//     any of ttft_cpu_ms, ttft_disk_ms, ttft_remote_ms; a tier's point is
//     its TTFT less the GPU one.
//   - Transfer times, as the Mooncake PD tables give them:
//     prompt_tokens and kv_transfer_ms (a transfer over the network:
//     tier remote).
//
// Times may be in seconds instead (a _s suffix). A kv_bytes column, or
// kv_size with a unit (B, KB, MB, GB decimal; KiB, MiB, GiB binary), gives
// each row's bytes; without one FitLinks takes tokens × the model's KV
// bytes per token. Other columns are ignored. Bad input is a *TableError
// naming the file and line.
func ParseLinkTable(file string, data []byte) ([]LinkPoint, error) {
	r := csv.NewReader(bytes.NewReader(data))
	r.Comment = '#'
	r.FieldsPerRecord = -1
	r.TrimLeadingSpace = true
	header, err := r.Read()
	if err != nil {
		line := 1
		var pe *csv.ParseError
		if errors.As(err, &pe) {
			line = pe.Line
		}
		if err == io.EOF {
			err = errors.New("no header line")
		}
		return nil, &TableError{File: file, Line: line, Field: "header", Msg: err.Error()}
	}
	hline, _ := r.FieldPos(0)
	col := map[string]int{}
	for i, h := range header {
		h = strings.ToLower(strings.TrimSpace(h))
		if _, dup := col[h]; dup && h != "" {
			return nil, &TableError{File: file, Line: hline, Field: h, Msg: "column given twice"}
		}
		col[h] = i
	}
	timeCol := func(name string) (int, float64, bool) {
		if i, ok := col[name+"_ms"]; ok {
			return i, 1e-3, true
		}
		if i, ok := col[name+"_s"]; ok {
			return i, 1, true
		}
		return 0, 0, false
	}
	tokCol, ok := col["prompt_tokens"]
	if !ok {
		return nil, &TableError{File: file, Line: hline, Field: "header", Msg: "no prompt_tokens column"}
	}
	type tierCol struct {
		tier  string
		i     int
		scale float64
	}
	var tiers []tierCol
	gpu, gpuScale, hasGPU := timeCol("ttft_gpu")
	for _, t := range []struct{ col, tier string }{{"ttft_cpu", LinkHost}, {"ttft_disk", LinkDisk}, {"ttft_remote", LinkRemote}} {
		if i, s, ok := timeCol(t.col); ok {
			if !hasGPU {
				return nil, &TableError{File: file, Line: hline, Field: t.col, Msg: "a tier's TTFT needs the GPU-hit TTFT (ttft_gpu_ms) to subtract"}
			}
			tiers = append(tiers, tierCol{t.tier, i, s})
		}
	}
	if i, s, ok := timeCol("kv_transfer"); ok {
		if len(tiers) > 0 {
			return nil, &TableError{File: file, Line: hline, Field: "kv_transfer", Msg: "give transfer times or TTFTs by tier, not both"}
		}
		tiers = append(tiers, tierCol{LinkRemote, i, s})
	}
	if len(tiers) == 0 {
		return nil, &TableError{File: file, Line: hline, Field: "header", Msg: "no tier column (ttft_cpu_ms, ttft_disk_ms, ttft_remote_ms with ttft_gpu_ms, or kv_transfer_ms)"}
	}
	bytesCol, hasBytes := col["kv_bytes"]
	sizeCol, hasSize := col["kv_size"]
	var pts []LinkPoint
	for {
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			line := hline + 1
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				line = pe.Line
			}
			return nil, &TableError{File: file, Line: line, Field: "row", Msg: err.Error()}
		}
		line, _ := r.FieldPos(0) // (only after a record was read)
		field := func(i int) (string, error) {
			if i >= len(rec) {
				return "", &TableError{File: file, Line: line, Field: header[i], Msg: fmt.Sprintf("missing (the row has %d fields, the header %d)", len(rec), len(header))}
			}
			return strings.TrimSpace(rec[i]), nil
		}
		num := func(i int, scale float64) (float64, error) {
			s, err := field(i)
			if err != nil {
				return 0, err
			}
			v, err := strconv.ParseFloat(s, 64)
			if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || v*scale > 1e6 {
				return 0, &TableError{File: file, Line: line, Field: header[i], Msg: fmt.Sprintf("%q is not a non-negative number (of up to 10⁶ s)", s)}
			}
			return v * scale, nil
		}
		ts, err := field(tokCol)
		if err != nil {
			return nil, err
		}
		tokens, err := strconv.ParseInt(ts, 10, 64)
		if err != nil || tokens <= 0 || tokens > 1<<40 {
			return nil, &TableError{File: file, Line: line, Field: header[tokCol], Msg: fmt.Sprintf("%q is not a positive token count", ts)}
		}
		var b float64
		switch {
		case hasBytes:
			if b, err = num(bytesCol, 1e-6); err != nil { // (the limit: 10¹² bytes)
				return nil, err
			}
			b *= 1e6
		case hasSize:
			s, err := field(sizeCol)
			if err != nil {
				return nil, err
			}
			if b, err = parseSize(s); err != nil {
				return nil, &TableError{File: file, Line: line, Field: header[sizeCol], Msg: err.Error()}
			}
		}
		var base float64
		if hasGPU {
			if base, err = num(gpu, gpuScale); err != nil {
				return nil, err
			}
		}
		for _, t := range tiers {
			v, err := num(t.i, t.scale)
			if err != nil {
				return nil, err
			}
			if v < base {
				return nil, &TableError{File: file, Line: line, Field: header[t.i], Msg: fmt.Sprintf("%g s is below the GPU-hit TTFT %g s", v, base)}
			}
			pts = append(pts, LinkPoint{Tier: t.tier, Line: line, Tokens: tokens, Bytes: b, Seconds: v - base})
		}
	}
	if len(pts) == 0 {
		return nil, &TableError{File: file, Line: hline, Field: "table", Msg: "no measurements"}
	}
	return pts, nil
}

// parseSize reads a size such as "49 MB", "1.58 GB" or "146 MiB".
func parseSize(s string) (float64, error) {
	i := strings.IndexFunc(s, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if i <= 0 {
		return 0, fmt.Errorf("%q is not a size such as 49 MB", s)
	}
	v, err := strconv.ParseFloat(s[:i], 64)
	units := map[string]float64{"b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}
	u, ok := units[strings.ToLower(strings.TrimSpace(s[i:]))]
	if err != nil || !ok || v*u > 1e15 {
		return 0, fmt.Errorf("%q is not a size such as 49 MB (units B, KB, MB, GB, TB, KiB, MiB, GiB, TiB; up to 10¹⁵ B)", s)
	}
	return v * u, nil
}

// A LinkFit is a link's bandwidth and latency fitted by least squares to
// a tier's points: Seconds = Latency + Bytes / Bandwidth.
type LinkFit struct {
	Tier      string
	Points    int
	Bandwidth float64 // B/s over the whole path, all of a worker's GPUs
	Latency   float64 // s over the whole path
	R2        float64
	MAPE      float64  // mean absolute percentage error of the fitted times
	Warnings  []string // a negative intercept fitted through the origin, ...
}

// FitLinks fits a link to each tier's points, in the order host, disk,
// remote. Points without bytes take Tokens × kvBytesPerToken (one
// worker's KV bytes per token, all its GPUs). A tier needs two distinct
// sizes, and a time that grows with the size.
func FitLinks(pts []LinkPoint, kvBytesPerToken int64) ([]LinkFit, error) {
	var fits []LinkFit
	for _, tier := range []string{LinkHost, LinkDisk, LinkRemote} {
		var x, y []float64
		for _, p := range pts {
			if p.Tier != tier {
				continue
			}
			b := p.Bytes
			if b == 0 {
				if kvBytesPerToken <= 0 {
					return nil, fmt.Errorf("calibrate: tier %s, line %d: no KV bytes in the table and no model to size them", tier, p.Line)
				}
				b = float64(p.Tokens) * float64(kvBytesPerToken)
			}
			x, y = append(x, b), append(y, p.Seconds)
		}
		if len(x) == 0 {
			continue
		}
		f, err := fitLink(tier, x, y)
		if err != nil {
			return nil, err
		}
		fits = append(fits, f)
	}
	if len(fits) == 0 {
		return nil, errors.New("calibrate: no link measurements")
	}
	return fits, nil
}

// fitLink is ordinary least squares of y on x with an intercept; a
// negative intercept (less time than no latency at all would take) is
// refitted through the origin.
func fitLink(tier string, x, y []float64) (LinkFit, error) {
	f := LinkFit{Tier: tier, Points: len(x)}
	if slices.Min(x) == slices.Max(x) {
		return f, fmt.Errorf("calibrate: tier %s: all %d points move %g bytes: a bandwidth needs two sizes", tier, len(x), x[0])
	}
	n := float64(len(x))
	var sx, sy float64
	for i := range x {
		sx, sy = sx+x[i], sy+y[i]
	}
	mx, my := sx/n, sy/n
	var sxx, sxy float64
	for i := range x {
		sxx += (x[i] - mx) * (x[i] - mx)
		sxy += (x[i] - mx) * (y[i] - my)
	}
	slope := sxy / sxx
	icept := my - slope*mx
	if icept < 0 {
		var xx, xy float64
		for i := range x {
			xx, xy = xx+x[i]*x[i], xy+x[i]*y[i]
		}
		slope, icept = xy/xx, 0
		f.Warnings = append(f.Warnings, "the intercept came out negative: fitted through the origin (latency 0)")
	}
	if !(slope > 0) {
		return f, fmt.Errorf("calibrate: tier %s: the extra time does not grow with the bytes moved (slope %g s/B): no bandwidth to fit", tier, slope)
	}
	f.Bandwidth, f.Latency = 1/slope, icept
	var ssr, sst, ape float64
	for i := range x {
		pred := icept + slope*x[i]
		ssr += (y[i] - pred) * (y[i] - pred)
		sst += (y[i] - my) * (y[i] - my)
		if y[i] > 0 {
			ape += math.Abs(pred-y[i]) / y[i]
		}
	}
	f.R2 = 1
	if sst > 0 {
		f.R2 = 1 - ssr/sst
	}
	f.MAPE = ape / n
	if len(x) == 2 {
		f.Warnings = append(f.Warnings, "two points: the line goes through both, no fit quality to judge")
	}
	return f, nil
}

// LinkNodeSpec returns the fits as a cluster file's node_override keys for a
// node n whose workers have gpusPerWorker GPUs. A tier's path crosses
// links besides its own (disk and remote data land in host memory, then
// cross PCIe, unless n has GPUDirect Storage): their latencies in n are
// taken from the fitted one, and a fitted bandwidth above theirs is
// warned of (another link would be the bottleneck). A host fit divides
// its bandwidth over the worker's PCIe links, which move its GPUs'
// shards in parallel.
func LinkNodeSpec(fits []LinkFit, n model.Node, gpusPerWorker int) (model.NodeSpec, []string) {
	var spec model.NodeSpec
	var warn []string
	pcieBW, pcieLat := n.PCIe.Bandwidth*float64(gpusPerWorker), n.PCIe.Latency.Seconds()
	for _, f := range fits {
		if f.Tier == LinkHost {
			pcieBW, pcieLat = f.Bandwidth, f.Latency-n.HostDRAM.Latency.Seconds()
		}
	}
	// Keys to the nanosecond and the kB/s: a fit's last bits are noise.
	us := func(v float64) *float64 { v = math.Round(max(v, 0)*1e9) / 1e3; return &v }
	gbps := func(v float64) *float64 { v = math.Round(v/1e3) / 1e6; return &v }
	for _, f := range fits {
		switch f.Tier {
		case LinkHost:
			spec.PCIeGBps = gbps(f.Bandwidth / float64(gpusPerWorker))
			spec.PCIeLatencyUs = us(f.Latency - n.HostDRAM.Latency.Seconds())
			if f.Bandwidth > n.HostDRAM.Bandwidth {
				warn = append(warn, fmt.Sprintf("host: %.3g GB/s is over the node's host memory bandwidth %.3g GB/s", f.Bandwidth/1e9, n.HostDRAM.Bandwidth/1e9))
			}
		case LinkDisk, LinkRemote:
			dev := n.NVMe
			if f.Tier == LinkRemote {
				dev = n.Network
			}
			other := n.HostDRAM.Latency.Seconds() + pcieLat
			if n.GPUDirectStorage {
				other = pcieLat
			}
			lat := us(f.Latency - other)
			if f.Latency < other {
				warn = append(warn, fmt.Sprintf("%s: the fitted latency %.3g µs is below the other links' on its path (%.3g µs): %s taken as 0", f.Tier, f.Latency*1e6, other*1e6, dev.Name))
			}
			if f.Bandwidth > pcieBW {
				warn = append(warn, fmt.Sprintf("%s: %.3g GB/s is over the PCIe bandwidth of the path, %.3g GB/s: PCIe, not %s, would bound it", f.Tier, f.Bandwidth/1e9, pcieBW/1e9, f.Tier))
			}
			if f.Tier == LinkDisk {
				spec.NVMeGBps, spec.NVMeLatencyUs = gbps(f.Bandwidth), lat
			} else {
				spec.NetworkGBps, spec.NetworkLatencyUs = gbps(f.Bandwidth), lat
			}
		}
	}
	return spec, warn
}

// WriteLinkFits prints the fits, one line a tier, then the warnings.
func WriteLinkFits(w io.Writer, fits []LinkFit, warnings []string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%-7s %6s %14s %14s %8s %8s\n", "tier", "points", "bandwidth GB/s", "latency µs", "R²", "MAPE")
	for _, f := range fits {
		fmt.Fprintf(&b, "%-7s %6d %14.4g %14.4g %8.5f %7.2f%%\n", f.Tier, f.Points, f.Bandwidth/1e9, f.Latency*1e6, f.R2, 100*f.MAPE)
	}
	for _, f := range fits {
		for _, m := range f.Warnings {
			fmt.Fprintf(&b, "warning: %s: %s\n", f.Tier, m)
		}
	}
	for _, m := range warnings {
		fmt.Fprintf(&b, "warning: %s\n", m)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
