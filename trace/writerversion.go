package trace

import (
	"runtime/debug"
	"strings"
)

// CreatedBy is the created_by field of the files Writer writes:
// "opaltrace version X (build Y)", X the module version Go stamped into the
// binary (devel when it stamped none, as under go test) and Y its VCS
// revision (unknown without one).
//
// Note: the form is parquet-java's (VersionParser: application, " version
// ", version, " (build ", hash, ")"). A created_by it cannot parse, the
// bare "opaltrace" this package wrote before, makes parquet-java, and so
// Spark, Trino and Hive, ignore the statistics of every string column
// (CorruptStatistics.shouldIgnoreStatistics, PARQUET-251): no pruning of
// row groups by run, model or status.
var CreatedBy = createdBy(debug.ReadBuildInfo())

func createdBy(info *debug.BuildInfo, ok bool) string {
	version, build := "devel", "unknown"
	if ok {
		if v := info.Main.Version; v != "" && v != "(devel)" {
			version = v
		}
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" && s.Value != "" {
				build = s.Value
			}
		}
	}
	return "opaltrace version " + versionWord(version) + " (build " + versionWord(build) + ")"
}

// versionWord keeps what parquet-java's pattern accepts in a version or a
// build: no space, which would end the word, and no parenthesis, which
// would end the build or begin it.
func versionWord(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == '(' || r == ')' || r <= ' ' {
			return -1
		}
		return r
	}, s)
	if s == "" {
		return "unknown"
	}
	return s
}
