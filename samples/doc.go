// Package samples holds small real traces and model configurations shipped
// inside the opaltrace binary, for `opaltrace demo` and for tests. SOURCES.md
// gives the origin and licence of each file.
package samples
