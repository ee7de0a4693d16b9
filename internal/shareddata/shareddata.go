package shareddata

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// Root returns the shared/data directory: $OPALTRACE_SHARED_DATA, or
// ../shared/data beside the repository root.
func Root() string {
	if d := os.Getenv("OPALTRACE_SHARED_DATA"); d != "" {
		return d
	}
	_, file, _, _ := runtime.Caller(0)
	repo := filepath.Join(filepath.Dir(file), "..", "..")
	return filepath.Join(repo, "..", "shared", "data")
}

// Path returns the path of rel (e.g. "traces/mooncake/conversation_trace.jsonl")
// under Root. When the file is missing it skips the test, or fails it under
// CI=true.
func Path(tb testing.TB, rel string) string {
	tb.Helper()
	p := filepath.Join(Root(), rel)
	if _, err := os.Stat(p); err != nil {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("shared data file missing under CI=true: %v", err)
		}
		tb.Skipf("shared data file not present (%v); it lives in ../shared/data beside the repository", err)
	}
	return p
}
