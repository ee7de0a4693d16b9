// Package trace holds opaltrace's data model: the Request record (one row
// of every table, observed or simulated), the Run metadata that travels with
// a dataset, and the streaming Parquet reader and writer.
//
// Time inside the library is Time, int64 nanoseconds since the start of the
// trace. Durations measured by a source (TTFT, E2E, ITL gaps, server-side
// queue and prefill times) are float64 seconds as the source wrote them, so
// that summaries recomputed from them equal the source's own to the last
// digit. In Parquet every time is float64 seconds since the trace start; the
// conversion happens in one place (parquet.go).
//
// Absent is never zero: optional values are Opt, lists are nil when absent,
// and both become Parquet nulls.
//
// The writer encodes its pages itself (pqpage.go, pqchunk.go) and lets
// arrow-go build the footer; its guards are tests against arrow-go's own
// writer (pqarrow) on random records, reads by three independent readers
// (arrow-go, DuckDB, hyparquet), writer properties checked against the
// pages when a writer starts (writerprops.go), and a created_by that
// parquet-java parses (writerversion.go).
//
// Package trace imports nothing else from opaltrace.
package trace
