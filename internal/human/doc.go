// Package human formats numbers for people: counts as integers with
// thousands separators, measured values with two decimals and their unit.
// Summaries, progress lines and messages use it; machine outputs (JSON,
// Parquet) keep full precision and never go through it.
package human
