// Package opal reads IBM Opal's (opal-sim) configurations and writes its
// outputs, so that a team that used Opal can replay its configurations on
// opaltrace and keep the scripts it built on Opal's results.
//
// Load reads a sim_config.json whole, strictly (unknown keys and values
// out of range are "FILE:LINE: KEY: what is wrong"), resolving its model
// and trace files as Opal does. Config.ClusterYAML turns it into an
// opaltrace cluster file, replayed with opaltrace's semantics; Config.Compat
// into the settings of replay.RunOpalCompat, which reproduces what Opal
// computes, quirks included (../shared/docs/opal-notes.md).
// WriteStats writes a replayed stage as Opal's opal_stats.json.
package opal
