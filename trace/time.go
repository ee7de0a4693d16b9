package trace

import (
	"math"
	"time"
)

// A Time is a point in a trace: nanoseconds since the start of the trace.
type Time int64

// Sub returns the duration t−u.
func (t Time) Sub(u Time) time.Duration { return time.Duration(t - u) }

// Seconds returns t as float64 seconds since the trace start, the unit of
// the Parquet columns.
func (t Time) Seconds() float64 { return float64(t) / 1e9 }

// Add returns t shifted by d.
func (t Time) Add(d time.Duration) Time { return t + Time(d) }

// TimeFromSeconds converts seconds since the trace start to a Time, rounding
// to the nearest nanosecond. It is the inverse of Time.Seconds for every
// Time within ±104 days of the start.
func TimeFromSeconds(s float64) Time { return Time(math.Round(s * 1e9)) }

// DurationSeconds converts a duration in seconds to nanoseconds, rounded.
func DurationSeconds(s float64) time.Duration { return time.Duration(math.Round(s * 1e9)) }
