package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"
)

// TestVersionOf formats the build information of the three kinds of
// build: a module install, a build in a git checkout (clean and with
// changes), and a build that recorded no VCS information.
func TestVersionOf(t *testing.T) {
	vcs := []debug.BuildSetting{{Key: "-buildmode", Value: "exe"}, {Key: "vcs", Value: "git"},
		{Key: "vcs.revision", Value: "1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b"}, {Key: "vcs.time", Value: "2026-12-01T20:00:00Z"}}
	for _, c := range []struct {
		name string
		bi   debug.BuildInfo
		want string
	}{
		{"module install", debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/opaltrace/opaltrace", Version: "v0.3.0"}},
			"v0.3.0 (go1.26.0)"},
		{"checkout", debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}, Settings: append(vcs, debug.BuildSetting{Key: "vcs.modified", Value: "false"})},
			"(devel) 1a2b3c4d5e6f, 2026-12-01T20:00:00Z (go1.26.0)"},
		{"checkout with changes", debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}, Settings: append(vcs, debug.BuildSetting{Key: "vcs.modified", Value: "true"})},
			"(devel) 1a2b3c4d5e6f, 2026-12-01T20:00:00Z, modified (go1.26.0)"},
		{"-buildvcs=false", debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{{Key: "-buildvcs", Value: "false"}}},
			"(devel), no VCS revision (go1.26.0)"},
		{"no main version", debug.BuildInfo{GoVersion: "go1.26.0"}, "(devel), no VCS revision (go1.26.0)"},
	} {
		if got := versionOf(&c.bi); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// TestVersionOfAVCSBuild builds the command with -buildvcs=true (this
// machine's GOFLAGS say false) in its git checkout and checks that
// --version names the checkout's HEAD revision. It links the whole
// binary, so -short skips it.
func TestVersionOfAVCSBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("links the binary; skipped with -short")
	}
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("no git")
	}
	head, err := exec.Command(git, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not in a git checkout: %v", err)
	}
	// The go command finds a git repository by a .git directory: in a
	// git worktree, where .git is a file, it stamps no VCS information
	// (checked with go1.26), and --version rightly says so.
	if st, err := os.Stat(filepath.Join("..", "..", ".git")); err != nil || !st.IsDir() {
		t.Skip("not a git clone (a worktree's .git is a file, which the go command does not stamp from)")
	}
	bin := filepath.Join(t.TempDir(), "opaltrace")
	build := exec.Command("go", "build", "-buildvcs=true", "-o", bin, ".")
	build.Env = append(os.Environ(), "GOFLAGS=-buildvcs=true") // an empty GOFLAGS would fall back to go env's
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build -buildvcs=true: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	rev := strings.TrimSpace(string(head))[:12]
	// The go command (1.24 on) also makes the main module's version a
	// pseudo-version from the revision: v0.0.0-TIME-REV(+dirty).
	if !regexp.MustCompile(`^opaltrace version (\(devel\)|v\S+) ` + rev + `, \d{4}-\d\d-\d\dT[0-9:]+Z(, modified)? \(go[^)]+\)\n$`).Match(out) {
		t.Errorf("--version of a VCS build: %q, want HEAD %s", out, rev)
	}
}
