package main

import (
	"fmt"
	"os"
	"path/filepath"
)

// An outputFile is a file a command writes, named by its flag.
type outputFile struct {
	flag, path string
}

// checkOutputs refuses outputs that would overwrite one of the inputs or
// each other: the same file by device and inode (os.SameFile, symlinks
// followed) for files that exist, the same resolved path for files that
// do not yet. An empty path is no output. Inputs that do not exist are
// left to the reader to report.
func checkOutputs(outs []outputFile, inputs []string) error {
	type seen struct {
		flag, path string
		fi         os.FileInfo // nil when the file does not exist yet
		resolved   string
	}
	var done []seen
	for _, o := range outs {
		if o.path == "" || o.path == "-" {
			continue
		}
		fi, _ := os.Stat(o.path)
		res := resolvedPath(o.path)
		for _, in := range inputs {
			if in == "" || in == "-" {
				continue
			}
			if ifi, err := os.Stat(in); err == nil && fi != nil && os.SameFile(fi, ifi) ||
				fi == nil && resolvedPath(in) == res {
				return fmt.Errorf("--%s %s is the input %s: refusing to overwrite an input", o.flag, o.path, in)
			}
		}
		for _, d := range done {
			if fi != nil && d.fi != nil && os.SameFile(fi, d.fi) || res == d.resolved {
				return fmt.Errorf("--%s %s and --%s %s are the same file: give each output its own path", d.flag, d.path, o.flag, o.path)
			}
		}
		done = append(done, seen{o.flag, o.path, fi, res})
	}
	return nil
}

// resolvedPath is path made absolute with the symlinks of its directory
// resolved, so that two spellings of a file not yet written compare equal.
func resolvedPath(path string) string {
	abs, err := filepath.Abs(path)
	if err != nil {
		return filepath.Clean(path)
	}
	if r, err := filepath.EvalSymlinks(abs); err == nil {
		return r
	}
	dir, base := filepath.Split(abs)
	if r, err := filepath.EvalSymlinks(dir); err == nil {
		return filepath.Join(r, base)
	}
	return abs
}
