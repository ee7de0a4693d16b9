package main

import (
	"fmt"
	"math"

	"github.com/opaltrace/opaltrace/trace"
)

// Bounds of the numeric flags of stats, report and ingest, checked where
// the flag is parsed (urfave/cli's Validator), so that a value outside them
// is an error naming the flag and the bound, never silently a default, an
// unlimited value or a NaN that every comparison lets through.
const (
	minResamples = 100     // fewer gives no 2.5 % tail to a 95 % interval
	maxResamples = 100_000 // the bootstrap costs resamples × requests
	maxErrorsMax = 1 << 30 // --max-errors: beyond it, 0 (no limit) says it
	maxTP        = 1 << 16 // --tp of ingest: parallelism recorded with a run
	maxPercents  = 100     // --percentiles: at most this many
	// --max-line-bytes: a line is held whole, and what it decodes into is
	// larger still.
	maxLineBytesMax = 1 << 30
	// --max-document-bytes: a document is held whole (vLLM's mapped from
	// a temporary file).
	maxDocumentBytesMax = 1 << 40
)

// intIn returns a Validator accepting lo ≤ v ≤ hi.
func intIn(lo, hi int) func(int) error {
	return func(v int) error {
		if v < lo || v > hi {
			return fmt.Errorf("%d is not in [%d, %d]", v, lo, hi)
		}
		return nil
	}
}

// secondsIn returns a Validator accepting a finite number of seconds in
// [0, trace.MaxTraceTime] (10 years, the longest span a trace may have).
func secondsIn() func(float64) error {
	maxSec := trace.MaxTraceTime.Seconds()
	return func(v float64) error {
		if !(v >= 0 && v <= maxSec) { // NaN fails both
			return fmt.Errorf("%v is not a number of seconds in [0, %.0f]", v, maxSec)
		}
		return nil
	}
}

// finiteIn reports whether lo ≤ v ≤ hi; false for NaN.
func finiteIn(v, lo, hi float64) bool {
	return v >= lo && v <= hi && !math.IsNaN(v)
}
