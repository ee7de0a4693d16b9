// Package progress shows the progress of long work (a replay, the ingest
// of a large input, the passes of an exact summary, a calibration) on
// stderr: an mpb bar when stderr is a terminal, otherwise one line when
// the work is done ("replay: 12,031 requests in 1.62 s"), so logs and
// redirected output hold no escape codes.
//
// Library code never prints: it takes a plain callback (a func of the
// units done), which the command wires to a Task. Tasks are cheap to feed
// from a hot loop through a Counter, which calls the Task once every
// Every units, not once per unit.
package progress
