package ingest

import (
	"errors"
	"fmt"
)

// A SyntaxError is a bad record: the input could be read, but one record
// (a line, a run object or one element of its arrays) is malformed. Bad
// records are not fatal; readers report them and go on.
type SyntaxError struct {
	File string // input file name as given ("-" for stdin)
	Line int    // line in the file, 1-based; 0 when unknown
	Msg  string // starts with the source's field name: "ttfts: 12 entries for 10 requests"
}

// Error returns "FILE:LINE: MSG".
func (e *SyntaxError) Error() string { return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg) }

// Pos returns where the bad record is, so that a SyntaxError is a Record.
func (e *SyntaxError) Pos() (file string, line int) { return e.File, e.Line }

// A Warning is a record that is kept but looks wrong for a reason the
// source is known to have (Opal's TTFT over its E2E): not a bad record, but
// something the user should know before comparing it with other data.
type Warning struct {
	File string
	Line int
	Msg  string
}

// Error returns "FILE:LINE: warning: MSG".
func (w *Warning) Error() string { return fmt.Sprintf("%s:%d: warning: %s", w.File, w.Line, w.Msg) }

// Pos returns where the warning is, so that a Warning is a Record.
func (w *Warning) Pos() (file string, line int) { return w.File, w.Line }

// ErrUnrecognized is wrapped by the error Detect returns when no format
// recognises the input.
var ErrUnrecognized = errors.New("unrecognized trace format")

// ErrTooManyErrors is wrapped by the error Files returns when the number of
// bad records passes Options.MaxErrors.
var ErrTooManyErrors = errors.New("too many bad records")

// ErrDocumentTooLong is wrapped by the error of an input of a
// whole-document format longer than Options.MaxDocumentBytes.
var ErrDocumentTooLong = errors.New("a whole JSON document over the limit")
