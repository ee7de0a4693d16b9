// Package deploy turns a deployment into a ready replay: from a cluster
// file, the recorded deployment of the run to replay, and the caller's
// overrides (command-line flags, a calibration's candidate cost model, a
// plan's choice) to the replay.Config, the step model, the KV capacity
// and the metadata the simulated run records, by one function, Resolve.
// The replay command, calibration by replay in the loop and capacity
// planning build their replays through it, so that all three replay the
// same deployment the same way.
//
// # The cluster file
//
// ParseCluster reads one YAML mapping over DefaultCluster, strictly:
// unknown keys, a second document, values of the wrong type (2.5
// workers), values out of their bounds (see check.go: MaxWorkers and the
// others) and keys given as 0 where 0 would silently mean "default" are
// errors, each "FILE:LINE: KEY: what is wrong". Settings (Cluster.With)
// apply the same checks to values given by flags, and name the flag.
//
// # What it does not do
//
// It reads no trace and runs no replay (package replay does); it does
// not parse cost model files (package calibrate does: the caller passes
// one as a CostModel, which keeps calibrate, itself a user of this
// package, out of its imports); it prints nothing.
package deploy
