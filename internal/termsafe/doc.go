// Package termsafe makes strings read from input files safe to print on a
// terminal or in a report: control characters (C0, DEL, C1 and the
// bidirectional overrides) are shown as Go escapes (\x1b, \u202e) instead
// of being sent, so a crafted model id or run name cannot set the
// terminal's title, move its cursor or reorder the text around it.
package termsafe
