package trace

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// A Second holds the statistics of one simulated second, [Second,
// Second+1) s, over all workers of a replay.
//
// Counts (arrivals, completions, timeouts, rejections) are of events in
// that second; steps, tokens and preemptions belong to the second their
// step started in. Running, Waiting and KVBlocksUsed are time-weighted
// means over the second, summed over workers, of each worker's values as
// of its latest step start (an idle worker holds no request and, as free
// blocks count as unused even when they keep cached content, no block).
// Busy is the fraction of the second the workers spent in steps, summed
// over workers and divided by their number: with autoscaling, by the
// workers on in that second (ready, starting or draining, time-weighted:
// what GPU-hours count).
type Second struct {
	Second       int64
	Arrivals     int64
	Completions  int64
	TimedOut     int64
	Rejected     int64
	Steps        int64
	Tokens       int64 // tokens computed: prefill chunk tokens plus one per decode
	Preemptions  int64
	Running      float64
	Waiting      float64
	KVBlocksUsed float64
	Busy         float64

	// KV tiers below the GPU (replays with tiers; 0 without). The
	// bytes each tier holds, summed over workers (the shared remote
	// store once), as of the second's first event; the bytes whose
	// stores (GPU or a tier to a tier), loads (a tier to a GPU) and
	// SGLang L3 prefetches (storage to host memory) started in the
	// second; and each class of link's utilisation in the second: the
	// bytes it carried over what its links could carry in a second.
	HostKVBytes, DiskKVBytes, RemoteKVBytes int64
	OffloadBytes, LoadBytes, PrefetchBytes  int64
	PCIeH2DUtil, PCIeD2HUtil                float64
	HostMemUtil, NVMeUtil, NICUtil          float64

	// ReadyWorkers is the time-weighted mean number of workers ready to
	// serve during the second: the fleet size, or under autoscaling the
	// ready workers (not those starting or draining). 0 in files before
	// version 4, which did not record it.
	ReadyWorkers float64
	// HeldAtGateway is the time-weighted mean number of requests waiting
	// at the gateway for a ready worker during the second (a fleet that
	// scales to zero, at zero or starting its first worker). 0 in files
	// before version 5.
	HeldAtGateway float64
	// PrefillReadyWorkers and DecodeReadyWorkers split ReadyWorkers into
	// the pools of prefill/decode disaggregation (0 without it, and in
	// files before version 6).
	PrefillReadyWorkers, DecodeReadyWorkers float64
}

// TokensPerStep is the mean number of tokens a step of this second
// computed (0 without steps).
func (s *Second) TokensPerStep() float64 {
	if s.Steps == 0 {
		return 0
	}
	return float64(s.Tokens) / float64(s.Steps)
}

// SecondsRun is the per-second statistics of one replayed run.
type SecondsRun struct {
	Run string // the run's name in the simulated requests' file
	// KVBlocks is the run's KV cache capacity in blocks, over all
	// workers, so that KVBlocksUsed / KVBlocks is the usage as a
	// fraction (0 when unknown).
	KVBlocks int64
	// The capacities in bytes of its KV tiers, over all workers (0:
	// none), for the occupancy as a fraction.
	HostKVCapacity, DiskKVCapacity, RemoteKVCapacity int64
	Seconds                                          []Second
}

// KVUsage is the second's KV blocks in use as a fraction of the capacity
// (0 when the capacity is unknown).
func (r SecondsRun) KVUsage(s Second) float64 {
	if r.KVBlocks <= 0 {
		return 0
	}
	return s.KVBlocksUsed / float64(r.KVBlocks)
}

// Per-second file metadata keys.
const (
	MetaSecondsVersion = "opaltrace.seconds_version" // SecondsVersion
	MetaReplayConfig   = "opaltrace.replay.config"   // the cluster configuration, YAML
	MetaCostModel      = "opaltrace.replay.cost_model"
)

// SecondsVersion is the version of the per-second Parquet layout: 2 adds
// the run and kv_blocks_capacity columns, 3 the KV tiers' (occupancy,
// capacity, offload, load and prefetch bytes, link utilisation), 4
// ready_workers, 5 gateway_held, 6 prefill_ready_workers and
// decode_ready_workers. ReadSeconds reads versions 2 to 6; an older
// file's newer columns read as 0.
const SecondsVersion = "6"

// secondsVersions are the versions ReadSeconds reads.
var secondsVersions = map[string]int{"2": 2, "3": 3, "4": 4, "5": 5, "6": 6}

// secondsColumns is the per-second Parquet schema: one row per run and
// simulated second, columns named after Second's fields (see Second for
// their meaning), tokens_per_step, and the run's name and KV capacity.
var secondsColumns = []struct {
	name string
	str  func(*SecondsRun, *Second) string
	i64  func(*SecondsRun, *Second) int64
	f64  func(*SecondsRun, *Second) float64
	set  func(*SecondsRun, *Second, any)
	// since is the layout version that added the column (0: 2).
	since int
}{
	{name: "run", str: func(r *SecondsRun, _ *Second) string { return r.Run }},
	{name: "second", i64: func(_ *SecondsRun, s *Second) int64 { return s.Second }, set: func(_ *SecondsRun, s *Second, v any) { s.Second = v.(int64) }},
	{name: "arrivals", i64: func(_ *SecondsRun, s *Second) int64 { return s.Arrivals }, set: func(_ *SecondsRun, s *Second, v any) { s.Arrivals = v.(int64) }},
	{name: "completions", i64: func(_ *SecondsRun, s *Second) int64 { return s.Completions }, set: func(_ *SecondsRun, s *Second, v any) { s.Completions = v.(int64) }},
	{name: "timed_out", i64: func(_ *SecondsRun, s *Second) int64 { return s.TimedOut }, set: func(_ *SecondsRun, s *Second, v any) { s.TimedOut = v.(int64) }},
	{name: "rejected", i64: func(_ *SecondsRun, s *Second) int64 { return s.Rejected }, set: func(_ *SecondsRun, s *Second, v any) { s.Rejected = v.(int64) }},
	{name: "running", f64: func(_ *SecondsRun, s *Second) float64 { return s.Running }, set: func(_ *SecondsRun, s *Second, v any) { s.Running = v.(float64) }},
	{name: "waiting", f64: func(_ *SecondsRun, s *Second) float64 { return s.Waiting }, set: func(_ *SecondsRun, s *Second, v any) { s.Waiting = v.(float64) }},
	{name: "busy", f64: func(_ *SecondsRun, s *Second) float64 { return s.Busy }, set: func(_ *SecondsRun, s *Second, v any) { s.Busy = v.(float64) }},
	{name: "kv_blocks_used", f64: func(_ *SecondsRun, s *Second) float64 { return s.KVBlocksUsed }, set: func(_ *SecondsRun, s *Second, v any) { s.KVBlocksUsed = v.(float64) }},
	{name: "kv_blocks_capacity", i64: func(r *SecondsRun, _ *Second) int64 { return r.KVBlocks }, set: func(r *SecondsRun, _ *Second, v any) { r.KVBlocks = v.(int64) }},
	{name: "steps", i64: func(_ *SecondsRun, s *Second) int64 { return s.Steps }, set: func(_ *SecondsRun, s *Second, v any) { s.Steps = v.(int64) }},
	{name: "tokens", i64: func(_ *SecondsRun, s *Second) int64 { return s.Tokens }, set: func(_ *SecondsRun, s *Second, v any) { s.Tokens = v.(int64) }},
	{name: "tokens_per_step", f64: func(_ *SecondsRun, s *Second) float64 { return s.TokensPerStep() }},
	{name: "preemptions", i64: func(_ *SecondsRun, s *Second) int64 { return s.Preemptions }, set: func(_ *SecondsRun, s *Second, v any) { s.Preemptions = v.(int64) }},
	{name: "host_kv_bytes", since: 3, i64: func(_ *SecondsRun, s *Second) int64 { return s.HostKVBytes }, set: func(_ *SecondsRun, s *Second, v any) { s.HostKVBytes = v.(int64) }},
	{name: "disk_kv_bytes", since: 3, i64: func(_ *SecondsRun, s *Second) int64 { return s.DiskKVBytes }, set: func(_ *SecondsRun, s *Second, v any) { s.DiskKVBytes = v.(int64) }},
	{name: "remote_kv_bytes", since: 3, i64: func(_ *SecondsRun, s *Second) int64 { return s.RemoteKVBytes }, set: func(_ *SecondsRun, s *Second, v any) { s.RemoteKVBytes = v.(int64) }},
	{name: "host_kv_capacity", since: 3, i64: func(r *SecondsRun, _ *Second) int64 { return r.HostKVCapacity }, set: func(r *SecondsRun, _ *Second, v any) { r.HostKVCapacity = v.(int64) }},
	{name: "disk_kv_capacity", since: 3, i64: func(r *SecondsRun, _ *Second) int64 { return r.DiskKVCapacity }, set: func(r *SecondsRun, _ *Second, v any) { r.DiskKVCapacity = v.(int64) }},
	{name: "remote_kv_capacity", since: 3, i64: func(r *SecondsRun, _ *Second) int64 { return r.RemoteKVCapacity }, set: func(r *SecondsRun, _ *Second, v any) { r.RemoteKVCapacity = v.(int64) }},
	{name: "offload_bytes", since: 3, i64: func(_ *SecondsRun, s *Second) int64 { return s.OffloadBytes }, set: func(_ *SecondsRun, s *Second, v any) { s.OffloadBytes = v.(int64) }},
	{name: "load_bytes", since: 3, i64: func(_ *SecondsRun, s *Second) int64 { return s.LoadBytes }, set: func(_ *SecondsRun, s *Second, v any) { s.LoadBytes = v.(int64) }},
	{name: "prefetch_bytes", since: 3, i64: func(_ *SecondsRun, s *Second) int64 { return s.PrefetchBytes }, set: func(_ *SecondsRun, s *Second, v any) { s.PrefetchBytes = v.(int64) }},
	{name: "pcie_h2d_util", since: 3, f64: func(_ *SecondsRun, s *Second) float64 { return s.PCIeH2DUtil }, set: func(_ *SecondsRun, s *Second, v any) { s.PCIeH2DUtil = v.(float64) }},
	{name: "pcie_d2h_util", since: 3, f64: func(_ *SecondsRun, s *Second) float64 { return s.PCIeD2HUtil }, set: func(_ *SecondsRun, s *Second, v any) { s.PCIeD2HUtil = v.(float64) }},
	{name: "host_mem_util", since: 3, f64: func(_ *SecondsRun, s *Second) float64 { return s.HostMemUtil }, set: func(_ *SecondsRun, s *Second, v any) { s.HostMemUtil = v.(float64) }},
	{name: "nvme_util", since: 3, f64: func(_ *SecondsRun, s *Second) float64 { return s.NVMeUtil }, set: func(_ *SecondsRun, s *Second, v any) { s.NVMeUtil = v.(float64) }},
	{name: "nic_util", since: 3, f64: func(_ *SecondsRun, s *Second) float64 { return s.NICUtil }, set: func(_ *SecondsRun, s *Second, v any) { s.NICUtil = v.(float64) }},
	{name: "ready_workers", since: 4, f64: func(_ *SecondsRun, s *Second) float64 { return s.ReadyWorkers }, set: func(_ *SecondsRun, s *Second, v any) { s.ReadyWorkers = v.(float64) }},
	{name: "gateway_held", since: 5, f64: func(_ *SecondsRun, s *Second) float64 { return s.HeldAtGateway }, set: func(_ *SecondsRun, s *Second, v any) { s.HeldAtGateway = v.(float64) }},
	{name: "prefill_ready_workers", since: 6, f64: func(_ *SecondsRun, s *Second) float64 { return s.PrefillReadyWorkers }, set: func(_ *SecondsRun, s *Second, v any) { s.PrefillReadyWorkers = v.(float64) }},
	{name: "decode_ready_workers", since: 6, f64: func(_ *SecondsRun, s *Second) float64 { return s.DecodeReadyWorkers }, set: func(_ *SecondsRun, s *Second, v any) { s.DecodeReadyWorkers = v.(float64) }},
}

// WriteSeconds writes the runs' per-second rows as a Parquet file (zstd,
// one row group) to w, with meta as key/value metadata in the order given
// (e.g. MetaReplayConfig, MetaCostModel). It does not close w.
//
// Note: it is written with arrow-go's pqarrow, not with the hand-written
// encoder of the requests' file: a few thousand rows per run, where
// simplicity beats speed.
func WriteSeconds(w io.Writer, runs []SecondsRun, meta [][2]string) error {
	return writeSeconds(w, runs, meta, secondsVersions[SecondsVersion])
}

// writeSeconds writes the layout of version (its columns only).
func writeSeconds(w io.Writer, runs []SecondsRun, meta [][2]string, version int) error {
	var cols []int
	for i, c := range secondsColumns {
		if c.since <= version {
			cols = append(cols, i)
		}
	}
	fields := make([]arrow.Field, len(cols))
	for i, ci := range cols {
		c := secondsColumns[ci]
		t := arrow.DataType(arrow.PrimitiveTypes.Int64)
		switch {
		case c.f64 != nil:
			t = arrow.PrimitiveTypes.Float64
		case c.str != nil:
			t = arrow.BinaryTypes.String
		}
		fields[i] = arrow.Field{Name: c.name, Type: t}
	}
	schema := arrow.NewSchema(fields, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	rows := 0
	for ri := range runs {
		r := &runs[ri]
		rows += len(r.Seconds)
		for i, ci := range cols {
			c := secondsColumns[ci]
			for j := range r.Seconds {
				s := &r.Seconds[j]
				switch {
				case c.f64 != nil:
					b.Field(i).(*array.Float64Builder).Append(c.f64(r, s))
				case c.str != nil:
					b.Field(i).(*array.StringBuilder).Append(c.str(r, s))
				default:
					b.Field(i).(*array.Int64Builder).Append(c.i64(r, s))
				}
			}
		}
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	props := parquet.NewWriterProperties(
		parquet.WithCompression(compress.Codecs.Zstd),
		parquet.WithCreatedBy(CreatedBy),
		parquet.WithMaxRowGroupLength(int64(max(rows, 1))),
	)
	// Hide any Close method: the caller decides when its file is done.
	fw, err := pqarrow.NewFileWriter(schema, struct{ io.Writer }{w}, props, pqarrow.DefaultWriterProps())
	if err != nil {
		return err
	}
	if err := fw.Write(rec); err != nil {
		return err
	}
	if err := fw.AppendKeyValueMetadata(MetaSecondsVersion, strconv.Itoa(version)); err != nil {
		return err
	}
	for _, kv := range meta {
		if err := fw.AppendKeyValueMetadata(kv[0], kv[1]); err != nil {
			return err
		}
	}
	return fw.Close()
}

// ReadSeconds reads a per-second file written by WriteSeconds: its runs,
// in the order of their first row, and its key/value metadata.
func ReadSeconds(path string) ([]SecondsRun, map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	pf, err := file.NewParquetReader(f)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	defer pf.Close()
	meta := map[string]string{}
	kv := pf.MetaData().KeyValueMetadata()
	for i, k := range kv.Keys() {
		meta[k] = kv.Values()[i]
	}
	version, ok := secondsVersions[meta[MetaSecondsVersion]]
	if !ok {
		return nil, nil, fmt.Errorf("%s: not an opaltrace per-second file of a version from 2 to %s (%s is %q)", path, SecondsVersion, MetaSecondsVersion, meta[MetaSecondsVersion])
	}
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	tbl, err := fr.ReadTable(context.Background())
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	defer tbl.Release()
	rd := array.NewTableReader(tbl, tbl.NumRows()+1)
	defer rd.Release()
	var runs []SecondsRun
	idx := map[string]int{}
	for rd.Next() {
		rec := rd.RecordBatch()
		cols := make([]arrow.Array, len(secondsColumns))
		for i, c := range secondsColumns {
			if c.since > version {
				continue // not in this version: read as 0
			}
			got := rec.Schema().FieldIndices(c.name)
			if len(got) != 1 {
				return nil, nil, fmt.Errorf("%s: column %s: missing", path, c.name)
			}
			cols[i] = rec.Column(got[0])
		}
		for row := 0; row < int(rec.NumRows()); row++ {
			name := cols[0].(*array.String).Value(row)
			ri, ok := idx[name]
			if !ok {
				ri = len(runs)
				idx[name] = ri
				runs = append(runs, SecondsRun{Run: name})
			}
			r := &runs[ri]
			var s Second
			for i, c := range secondsColumns {
				if c.set == nil || cols[i] == nil {
					continue
				}
				switch a := cols[i].(type) {
				case *array.Int64:
					c.set(r, &s, a.Value(row))
				case *array.Float64:
					c.set(r, &s, a.Value(row))
				default:
					return nil, nil, fmt.Errorf("%s: column %s: type %s", path, c.name, a.DataType())
				}
			}
			r.Seconds = append(r.Seconds, s)
		}
	}
	return runs, meta, rd.Err()
}
