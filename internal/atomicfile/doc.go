// Package atomicfile writes files atomically: to a temporary file in the
// same directory, renamed over the target only when everything was written.
// No run ever leaves a partial output behind.
package atomicfile
