package trace

import (
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// A column maps one Request field to one Parquet column: its Arrow field,
// the sink a Writer buffers the field in, and how to read it back.
type column struct {
	field   arrow.Field
	newSink func() colSink
	list    bool
	get     func(a arrow.Array, i int, r *Request)
	// ptr returns a pointer to the field in r (*string, *Opt[int64],
	// *Opt[float64], *Opt[Time] or a *[]T), for ScanColumns.
	ptr func(r *Request) any
}

// columns is the Parquet schema, in design.md's field-group order. Adding a
// Request field means adding one line here (and to String and Validate).
var columns = []column{
	strCol("request_id", func(r *Request) *string { return &r.RequestID }),
	strCol("run", func(r *Request) *string { return &r.Run }),
	strCol("stage", func(r *Request) *string { return &r.Stage }),
	strCol("source", func(r *Request) *string { return &r.Source }),
	strCol("model", func(r *Request) *string { return &r.Model }),
	strCol("lora", func(r *Request) *string { return &r.LoRA }),
	strCol("worker", func(r *Request) *string { return &r.Worker }),
	strCol("prefill_worker", func(r *Request) *string { return &r.PrefillWorker }),
	strCol("session", func(r *Request) *string { return &r.Session }),
	i64Col("turn", func(r *Request) *Opt[int64] { return &r.Turn }),
	strCol("status", func(r *Request) *string { return (*string)(&r.Status) }),
	strCol("error", func(r *Request) *string { return &r.Error }),
	strCol("finish_reason", func(r *Request) *string { return &r.FinishReason }),

	i64Col("input_tokens", func(r *Request) *Opt[int64] { return &r.InputTokens }),
	i64Col("output_tokens", func(r *Request) *Opt[int64] { return &r.OutputTokens }),
	i64Col("reasoning_tokens", func(r *Request) *Opt[int64] { return &r.ReasoningTokens }),
	i64Col("max_output_tokens", func(r *Request) *Opt[int64] { return &r.MaxOutputTokens }),
	i64Col("cached_tokens", func(r *Request) *Opt[int64] { return &r.CachedTokens }),
	i64Col("block_size", func(r *Request) *Opt[int64] { return &r.BlockSize }),
	listCol("hash_ids", arrow.PrimitiveTypes.Int64, func(r *Request) *[]int64 { return &r.HashIDs }),
	i64Col("device_hit_tokens", func(r *Request) *Opt[int64] { return &r.DeviceHitTokens }),
	i64Col("host_hit_tokens", func(r *Request) *Opt[int64] { return &r.HostHitTokens }),
	i64Col("storage_hit_tokens", func(r *Request) *Opt[int64] { return &r.StorageHitTokens }),
	i64Col("remote_hit_tokens", func(r *Request) *Opt[int64] { return &r.RemoteHitTokens }),

	timeCol("intended_arrival_s", func(r *Request) *Opt[Time] { return &r.IntendedArrival }),
	timeCol("arrival_s", func(r *Request) *Opt[Time] { return &r.Arrival }),
	f64Col("ttft_s", func(r *Request) *Opt[float64] { return &r.TTFTSec }),
	f64Col("e2e_s", func(r *Request) *Opt[float64] { return &r.E2ESec }),
	f64Col("last_token_s", func(r *Request) *Opt[float64] { return &r.LastTokenSec }),
	listCol("itl_s", arrow.PrimitiveTypes.Float64, func(r *Request) *[]float64 { return &r.ITLSec }),
	listCol("chunk_tokens", arrow.PrimitiveTypes.Int32, func(r *Request) *[]int32 { return &r.ChunkTokens }),
	i64Col("stream_events", func(r *Request) *Opt[int64] { return &r.StreamEvents }),
	i64Col("token_events", func(r *Request) *Opt[int64] { return &r.TokenEvents }),
	f64Col("think_s", func(r *Request) *Opt[float64] { return &r.ThinkSec }),
	f64Col("client_queue_s", func(r *Request) *Opt[float64] { return &r.ClientQueueSec }),

	f64Col("queue_s", func(r *Request) *Opt[float64] { return &r.QueueSec }),
	f64Col("schedule_s", func(r *Request) *Opt[float64] { return &r.ScheduleSec }),
	f64Col("idle_in_queue_s", func(r *Request) *Opt[float64] { return &r.IdleInQueueSec }),
	f64Col("budget_wait_s", func(r *Request) *Opt[float64] { return &r.BudgetWaitSec }),
	f64Col("prefill_s", func(r *Request) *Opt[float64] { return &r.PrefillSec }),
	f64Col("decode_s", func(r *Request) *Opt[float64] { return &r.DecodeSec }),
	f64Col("kv_fetch_s", func(r *Request) *Opt[float64] { return &r.KVFetchSec }),
	f64Col("storage_prefetch_io_s", func(r *Request) *Opt[float64] { return &r.StoragePrefetchIOSec }),
	f64Col("storage_prefetch_s", func(r *Request) *Opt[float64] { return &r.StoragePrefetchSec }),
	i64Col("preemptions", func(r *Request) *Opt[int64] { return &r.Preemptions }),

	timeCol("created_s", func(r *Request) *Opt[Time] { return &r.Created }),
	timeCol("router_arrival_s", func(r *Request) *Opt[Time] { return &r.RouterArrival }),
	timeCol("worker_arrival_s", func(r *Request) *Opt[Time] { return &r.WorkerArrival }),
	timeCol("start_processing_s", func(r *Request) *Opt[Time] { return &r.StartProcessing }),
	timeCol("ready_s", func(r *Request) *Opt[Time] { return &r.Ready }),
	timeCol("gpu_start_s", func(r *Request) *Opt[Time] { return &r.GPUStart }),
	timeCol("prefill_done_s", func(r *Request) *Opt[Time] { return &r.PrefillDone }),
	timeCol("decode_done_s", func(r *Request) *Opt[Time] { return &r.DecodeDone }),
	timeCol("done_at_router_s", func(r *Request) *Opt[Time] { return &r.DoneAtRouter }),

	strCol("itl_unit", func(r *Request) *string { return &r.ITLUnit }),
	strCol("e2e_basis", func(r *Request) *string { return &r.E2EBasis }),
	strCol("ttft_basis", func(r *Request) *string { return &r.TTFTBasis }),
	strCol("output_tokens_source", func(r *Request) *string { return &r.OutputTokensSource }),
	strCol("prefill_basis", func(r *Request) *string { return &r.PrefillBasis }),
	// Added after schema version 1's first files: older files lack the
	// column and read it as absent.
	f64Col("router_score", func(r *Request) *Opt[float64] { return &r.RouterScore }),
}

// Schema returns the Arrow schema of opaltrace's Parquet files.
func Schema() *arrow.Schema {
	fields := make([]arrow.Field, len(columns))
	for i, c := range columns {
		fields[i] = c.field
	}
	return arrow.NewSchema(fields, nil)
}

// strCol stores a string; "" is written as null (absent).
func strCol(name string, f func(*Request) *string) column {
	return column{
		field:   arrow.Field{Name: name, Type: arrow.BinaryTypes.String, Nullable: true},
		newSink: func() colSink { return &strSink{off: fieldOffset(f)} },
		ptr:     func(r *Request) any { return f(r) },
		get: func(a arrow.Array, i int, r *Request) {
			if a.IsValid(i) {
				*f(r) = a.(*array.String).Value(i)
			}
		},
	}
}

func i64Col(name string, f func(*Request) *Opt[int64]) column {
	return column{
		field:   arrow.Field{Name: name, Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		newSink: func() colSink { return &optSink[int64]{off: fieldOffset(f)} },
		ptr:     func(r *Request) any { return f(r) },
		get: func(a arrow.Array, i int, r *Request) {
			if a.IsValid(i) {
				*f(r) = Some(a.(*array.Int64).Value(i))
			}
		},
	}
}

func f64Col(name string, f func(*Request) *Opt[float64]) column {
	return column{
		field:   arrow.Field{Name: name, Type: arrow.PrimitiveTypes.Float64, Nullable: true},
		newSink: func() colSink { return &optSink[float64]{off: fieldOffset(f)} },
		ptr:     func(r *Request) any { return f(r) },
		get: func(a arrow.Array, i int, r *Request) {
			if a.IsValid(i) {
				*f(r) = Some(a.(*array.Float64).Value(i))
			}
		},
	}
}

// timeCol stores a Time as float64 seconds since the trace start: the one
// place where trace time becomes the Parquet unit and back.
func timeCol(name string, f func(*Request) *Opt[Time]) column {
	return column{
		field:   arrow.Field{Name: name, Type: arrow.PrimitiveTypes.Float64, Nullable: true},
		newSink: func() colSink { return &timeSink{off: fieldOffset(f)} },
		ptr:     func(r *Request) any { return f(r) },
		get: func(a arrow.Array, i int, r *Request) {
			if a.IsValid(i) {
				*f(r) = Some(TimeFromSeconds(a.(*array.Float64).Value(i)))
			}
		},
	}
}

// listCol stores a slice as a Parquet list; nil is null, empty is [].
// The list's element is named "element", as Parquet's list layout names
// it, so that the Arrow schema stored in the file matches its columns.
func listCol[T int64 | int32 | float64](name string, elem arrow.DataType, f func(*Request) *[]T) column {
	return column{
		field:   arrow.Field{Name: name, Type: arrow.ListOfField(arrow.Field{Name: "element", Type: elem, Nullable: true}), Nullable: true},
		newSink: func() colSink { return &listSink[T]{off: fieldOffset(f)} },
		ptr:     func(r *Request) any { return f(r) },
		list:    true,
		get: func(a arrow.Array, i int, r *Request) {
			if !a.IsValid(i) {
				return
			}
			l := a.(*array.List)
			start, end := l.ValueOffsets(i)
			out := make([]T, end-start)
			switch v := l.ListValues().(type) {
			case *array.Int64:
				copy(any(out).([]int64), v.Int64Values()[start:end])
			case *array.Int32:
				copy(any(out).([]int32), v.Int32Values()[start:end])
			case *array.Float64:
				copy(any(out).([]float64), v.Float64Values()[start:end])
			}
			*f(r) = out
		},
	}
}
