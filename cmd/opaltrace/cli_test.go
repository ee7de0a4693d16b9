package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/urfave/cli/v3"

	"github.com/opaltrace/opaltrace/trace"
)

// Exit status: 0 for a run that worked, 1 for bad data or a failed
// read, 2 for a command line that does not parse.
func TestExitCodes(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.jsonl")
	if err := os.WriteFile(bad, []byte("{\"timestamp\": 0, \"input_length\": -5, \"output_length\": 3, \"hash_ids\": [1]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"version"}, 0},
		{[]string{"stats", filepath.Join(dir, "missing.parquet")}, 1},
		{[]string{"ingest", "--format", "mooncake", "-o", filepath.Join(dir, "x.parquet"), bad}, 1},
		{[]string{"stats", "--percentiles", "x"}, 1},
		{[]string{"stats", "--no-such-flag", "x"}, 2},
		{[]string{"replay", "--seed", "abc", "-o", filepath.Join(dir, "y.parquet"), bad}, 2},
		{[]string{"replay", "--seed", "-1", "-o", filepath.Join(dir, "y.parquet"), bad}, 2},
	} {
		_, stderr, err := opaltrace(t, tc.args...)
		if got := exitCode(err); got != tc.want {
			t.Errorf("opaltrace %s: exit %d, want %d (%v)\n%s", strings.Join(tc.args, " "), got, tc.want, err, stderr)
		}
	}
}

// --version and the version command print the build's module version.
func TestVersion(t *testing.T) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		t.Skip("no build information in the test binary")
	}
	a, _, err := opaltrace(t, "--version")
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := opaltrace(t, "version")
	if err != nil {
		t.Fatal(err)
	}
	if a != "opaltrace version "+versionLine()+"\n" || b != "opaltrace "+versionLine()+"\n" || !strings.Contains(b, bi.Main.Version) || !strings.Contains(b, bi.GoVersion) {
		t.Errorf("--version %q, version %q; build %s %s", a, b, bi.Main.Version, bi.GoVersion)
	}
}

// completion prints a script for each shell urfave/cli supports.
func TestCompletion(t *testing.T) {
	for shell, want := range map[string]string{"bash": "complete", "zsh": "#compdef opaltrace", "fish": "complete -c opaltrace"} {
		out, stderr, err := opaltrace(t, "completion", shell)
		if err != nil || !strings.Contains(out, want) {
			t.Errorf("completion %s: %v, output lacks %q:\n%s%s", shell, err, want, out, stderr)
		}
	}
	if _, _, err := opaltrace(t, "completion", "tcsh"); err == nil {
		t.Error("completion tcsh accepted")
	}
}

// --hardware and --model list their presets; override flags show no
// default they do not have.
func TestHelpPresets(t *testing.T) {
	out, _, err := opaltrace(t, "replay", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"h100, ", "llama-3.1-8b, ", "--seed uint "} {
		if !strings.Contains(out, want) {
			t.Errorf("replay --help lacks %q", want)
		}
	}
	shown := regexp.MustCompile(`\(default: [^ )]*\)$`) // urfave's, not a usage's own words
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "override:") && shown.MatchString(line) {
			t.Errorf("an override flag shows a default: %s", strings.TrimSpace(line))
		}
	}
}

// A model id with a terminal escape (one that would set the terminal's
// title) reaches the terminal spelled out, in the summary and in errors.
func TestTerminalEscapes(t *testing.T) {
	dir := t.TempDir()
	in := writeTiny(t, dir)
	out := filepath.Join(dir, "x.parquet")
	evil := "llama\x1b]0;pwned\x07"
	if _, stderr, err := opaltrace(t, "ingest", "--model", evil, "-o", out, in); err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	stdout, stderr, err := opaltrace(t, "stats", out)
	if err != nil {
		t.Fatal(err)
	}
	if strings.ContainsAny(stdout+stderr, "\x1b\x07") || !strings.Contains(stdout, `llama\x1b]0;pwned\a`) {
		t.Errorf("stats printed the escape as it is, or not at all:\n%q", stdout)
	}
}

// An ingested file records its input's base name, not the path given.
func TestIngestRecordsBaseNames(t *testing.T) {
	dir := t.TempDir()
	in := writeTiny(t, dir)
	out := filepath.Join(dir, "x.parquet")
	if _, stderr, err := opaltrace(t, "ingest", "-o", out, in); err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	runs, _, err := trace.ReadRuns(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range runs {
		if r.File != filepath.Base(in) {
			t.Errorf("run %s records file %q, want %q", r.Name, r.File, filepath.Base(in))
		}
	}
}

// TestOverrideFlagsHideDefault: the help of every command shows no
// default after the usage of a flag that only overrides
// (hideOverrideDefault), whatever its value type, and still shows other
// flags' defaults.
func TestOverrideFlagsHideDefault(t *testing.T) {
	var overrides, defaults int
	for _, c := range newApp(io.Discard, io.Discard).Commands {
		var out bytes.Buffer
		if err := run(context.Background(), &out, io.Discard, []string{"opaltrace", c.Name, "--help"}); err != nil {
			t.Fatalf("%s --help: %v", c.Name, err)
		}
		help := out.String()
		defaults += strings.Count(help, "(default: ")
		for _, f := range c.Flags {
			d, ok := f.(cli.DocGenerationFlag)
			if !ok || !strings.HasPrefix(d.GetUsage(), "override:") {
				continue
			}
			overrides++
			_, after, found := strings.Cut(help, d.GetUsage())
			if !found {
				t.Errorf("%s: the help lacks %q", c.Name, d.GetUsage())
				continue
			}
			if line, _, _ := strings.Cut(after, "\n"); strings.Contains(line, "(default:") {
				t.Errorf("%s: the override %v shows a default:%s", c.Name, f.Names(), line)
			}
		}
	}
	if overrides == 0 || defaults == 0 {
		t.Errorf("%d override flags and %d defaults in the help: the check saw nothing", overrides, defaults)
	}
}
