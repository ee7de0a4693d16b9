package trace

import "fmt"

// An Opt is an optional value. The zero Opt is absent, which is a different
// fact from a present zero: a TTFT of 0 and an unknown TTFT must not merge.
type Opt[T any] struct {
	V  T
	OK bool
}

// Some returns a present Opt holding v.
func Some[T any](v T) Opt[T] { return Opt[T]{V: v, OK: true} }

// Get returns the value and whether it is present.
func (o Opt[T]) Get() (T, bool) { return o.V, o.OK }

// Or returns the value, or def when absent.
func (o Opt[T]) Or(def T) T {
	if o.OK {
		return o.V
	}
	return def
}

// String prints the value, or "-" when absent.
func (o Opt[T]) String() string {
	if !o.OK {
		return "-"
	}
	return fmt.Sprint(o.V)
}
