package replay

import (
	"io"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// Per-second file metadata keys.
const (
	MetaSecondsVersion = "opaltrace.seconds_version" // SecondsVersion
	MetaConfig         = "opaltrace.replay.config"   // the cluster configuration, YAML
	MetaCostModel      = "opaltrace.replay.cost_model"
)

// SecondsVersion is the version of the per-second Parquet layout.
const SecondsVersion = "1"

// secondsColumns is the per-second Parquet schema: one row per simulated
// second, columns named after Second's fields (see Second for their
// meaning) plus tokens_per_step.
var secondsColumns = []struct {
	name string
	i64  func(*Second) int64
	f64  func(*Second) float64
}{
	{name: "second", i64: func(s *Second) int64 { return s.Second }},
	{name: "arrivals", i64: func(s *Second) int64 { return s.Arrivals }},
	{name: "completions", i64: func(s *Second) int64 { return s.Completions }},
	{name: "timed_out", i64: func(s *Second) int64 { return s.TimedOut }},
	{name: "rejected", i64: func(s *Second) int64 { return s.Rejected }},
	{name: "running", f64: func(s *Second) float64 { return s.Running }},
	{name: "waiting", f64: func(s *Second) float64 { return s.Waiting }},
	{name: "busy", f64: func(s *Second) float64 { return s.Busy }},
	{name: "kv_blocks_used", f64: func(s *Second) float64 { return s.KVBlocksUsed }},
	{name: "steps", i64: func(s *Second) int64 { return s.Steps }},
	{name: "tokens", i64: func(s *Second) int64 { return s.Tokens }},
	{name: "tokens_per_step", f64: (*Second).TokensPerStep},
	{name: "preemptions", i64: func(s *Second) int64 { return s.Preemptions }},
}

// WriteSeconds writes rows as a Parquet file (zstd, one row group) to w,
// with meta as key/value metadata in the order given (config and cost
// model: MetaConfig, MetaCostModel). It does not close w.
func WriteSeconds(w io.Writer, rows []Second, meta [][2]string) error {
	fields := make([]arrow.Field, len(secondsColumns))
	for i, c := range secondsColumns {
		t := arrow.DataType(arrow.PrimitiveTypes.Int64)
		if c.f64 != nil {
			t = arrow.PrimitiveTypes.Float64
		}
		fields[i] = arrow.Field{Name: c.name, Type: t}
	}
	schema := arrow.NewSchema(fields, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	for i, c := range secondsColumns {
		for j := range rows {
			if c.f64 != nil {
				b.Field(i).(*array.Float64Builder).Append(c.f64(&rows[j]))
			} else {
				b.Field(i).(*array.Int64Builder).Append(c.i64(&rows[j]))
			}
		}
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	props := parquet.NewWriterProperties(
		parquet.WithCompression(compress.Codecs.Zstd),
		parquet.WithCreatedBy("opaltrace"),
		parquet.WithMaxRowGroupLength(int64(max(len(rows), 1))),
	)
	// Hide any Close method: the caller decides when its file is done.
	fw, err := pqarrow.NewFileWriter(schema, struct{ io.Writer }{w}, props, pqarrow.DefaultWriterProps())
	if err != nil {
		return err
	}
	if err := fw.Write(rec); err != nil {
		return err
	}
	if err := fw.AppendKeyValueMetadata(MetaSecondsVersion, SecondsVersion); err != nil {
		return err
	}
	for _, kv := range meta {
		if err := fw.AppendKeyValueMetadata(kv[0], kv[1]); err != nil {
			return err
		}
	}
	return fw.Close()
}
