/*
Opaltrace ingests LLM-serving traces into Parquet, prints vLLM-exact
summaries, replays the arrivals through a simulated serving cluster and
writes offline HTML reports.

Usage:

	opaltrace ingest    [--format auto|NAME] -o out.parquet FILE|DIR...
	opaltrace stats     [--json] [--percentiles 50,90,99] FILE...
	opaltrace calibrate (--server-side|--table) -o costmodel.yaml DATA...
	opaltrace replay    [--config cluster.yaml] [--model costmodel.yaml] -o simulated.parquet TRACE
	opaltrace report    --html report.html [LABEL=]FILE...
	opaltrace demo      [-o DIR]

Every command writes its outputs atomically, prints bad input as
FILE:LINE: field: what is wrong, and exits 1 on failure.

A session, from the repository root (doc_test.go runs these lines):

	$ opaltrace ingest -o mooncake.parquet samples/mooncake/conversation_trace_first10min.jsonl
	$ opaltrace stats mooncake.parquet
	$ opaltrace replay --workers 4 -o sim4.parquet mooncake.parquet
	$ opaltrace replay --workers 8 --run-name sim8 -o sim8.parquet mooncake.parquet
	$ opaltrace stats --json --percentiles 50,99 sim4.parquet
	$ opaltrace calibrate --server-side -o costmodel.yaml sim4.parquet
	$ opaltrace replay --workers 4 --model costmodel.yaml --run-name refit -o refit.parquet mooncake.parquet
	$ opaltrace report --html report.html 4w=sim4.parquet 8w=sim8.parquet refit=refit.parquet
*/
package main
