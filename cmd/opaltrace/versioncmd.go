package main

import (
	"context"
	"fmt"
	"io/fs"
	"path"
	"runtime/debug"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/opaltrace/opaltrace/model"
	"github.com/opaltrace/opaltrace/samples"
)

// versionCommand prints what --version prints.
func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the module version and the VCS revision it was built from",
		Action: func(_ context.Context, c *cli.Command) error {
			_, err := fmt.Fprintln(c.Writer, "opaltrace", versionLine())
			return err
		},
	}
}

// versionLine is the module version and VCS revision from the binary's
// build information (versionOf).
func versionLine() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(no build information)"
	}
	return versionOf(bi)
}

// versionOf formats build information: "v0.3.0 (go1.26.0)" for a module
// install (the module version names the code), "v0.0.0-20261201233638-
// cfa30219eabb+dirty cfa30219eabb, 2026-12-01T23:36:38Z, modified
// (go1.26.8)" for a build in a git clone (the go command's pseudo-version
// of the revision; "modified": with uncommitted changes), and "(devel), no VCS
// revision (go1.26.0)" for a build that recorded none: built with
// -buildvcs=false (GOFLAGS may set it), outside a checkout, or by go run
// before Go recorded it for go run.
func versionOf(bi *debug.BuildInfo) string {
	s := bi.Main.Version
	if s == "" {
		s = "(devel)"
	}
	var rev, at string
	modified := false
	for _, kv := range bi.Settings {
		switch kv.Key {
		case "vcs.revision":
			rev = kv.Value
		case "vcs.time":
			at = kv.Value
		case "vcs.modified":
			modified = kv.Value == "true"
		}
	}
	switch {
	case rev != "":
		s += " " + rev[:min(12, len(rev))]
		if at != "" {
			s += ", " + at
		}
		if modified {
			s += ", modified"
		}
	case s == "(devel)":
		s += ", no VCS revision"
	}
	return s + " (" + bi.GoVersion + ")"
}

// hardwarePresets and modelPresets list the names --hardware and --model
// take, for their help.
func hardwarePresets() string { return strings.Join(model.HardwareNames(), ", ") }

func modelPresets() string {
	entries, err := fs.ReadDir(samples.FS, samples.Models)
	if err != nil {
		return ""
	}
	var names []string
	for _, e := range entries {
		if _, err := fs.Stat(samples.FS, path.Join(samples.Models, e.Name(), "config.json")); e.IsDir() && err == nil {
			names = append(names, e.Name())
		}
	}
	return strings.Join(names, ", ")
}
