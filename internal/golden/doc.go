// Package golden compares test output with golden files under testdata/,
// rewriting them when the test runs with -update.
package golden
