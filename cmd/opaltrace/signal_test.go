//go:build unix

package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain runs the command itself when the test binary is started as
// opaltrace by a test (OPALTRACE_RUN_MAIN=1), so that signals reach a
// real process.
func TestMain(m *testing.M) {
	if os.Getenv("OPALTRACE_RUN_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestInterrupt: SIGINT, SIGTERM and SIGHUP in the middle of an ingest
// remove the unfinished output's temporary file and exit with 128 + the
// signal (130, 143, 129). The input is a FIFO nobody writes to, so the
// ingest is surely under way, its temporary file created, when the signal
// comes.
func TestInterrupt(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
		dir := t.TempDir()
		fifo := filepath.Join(dir, "in.jsonl")
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			t.Skipf("mkfifo: %v", err)
		}
		out := filepath.Join(dir, "out.parquet")
		cmd := exec.Command(os.Args[0], "ingest", "-o", out, fifo)
		cmd.Env = append(os.Environ(), "OPALTRACE_RUN_MAIN=1")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Opening the FIFO for writing waits for the reader: then the
		// temporary file exists (ingest creates it before it reads).
		w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for tempFiles(t, dir) == 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if tempFiles(t, dir) == 0 {
			t.Fatal("no temporary file appeared")
		}
		cmd.Process.Signal(sig)
		err = cmd.Wait()
		w.Close()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 128+int(sig) {
			t.Errorf("%v: exit %v, want status %d\n%s", sig, err, 128+int(sig), stderr.String())
		}
		if n := tempFiles(t, dir); n != 0 {
			t.Errorf("%v: %d temporary files left", sig, n)
		}
		if _, err := os.Stat(out); !os.IsNotExist(err) {
			t.Errorf("%v: an interrupted ingest wrote %s", sig, out)
		}
		if want := "opaltrace: interrupted (" + sig.String() + "); discarded the unfinished " + out + "\n"; stderr.String() != want {
			t.Errorf("%v: stderr %q, want %q", sig, stderr.String(), want)
		}
	}
}

// tempFiles counts the hidden temporary files in dir.
func tempFiles(t *testing.T, dir string) int {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp-") {
			n++
		}
	}
	return n
}
