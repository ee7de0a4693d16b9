package trace

import (
	"bytes"
	"regexp"
	"runtime/debug"
	"testing"

	"github.com/apache/arrow-go/v18/parquet/file"
)

// parquetJavaCreatedBy is parquet-java's VersionParser.FORMAT
// (parquet-common/src/main/java/org/apache/parquet/VersionParser.java),
// anchored as its Matcher.matches() is: application, version, build hash.
var parquetJavaCreatedBy = regexp.MustCompile(`^(.*?)\s+version\s*(?:([^(]*?)\s*(?:\(\s*build\s*([^)]*?)\s*\))?)?$`)

// created_by parses as parquet-java parses it, whatever Go stamped into
// the binary, so that Spark, Trino and Hive trust the string statistics.
func TestCreatedByParquetJavaForm(t *testing.T) {
	for _, tc := range []struct {
		name           string
		info           *debug.BuildInfo
		version, build string
	}{
		{"go test", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "devel", "unknown"},
		{"no build info", nil, "devel", "unknown"},
		{"release", &debug.BuildInfo{Main: debug.Module{Version: "v1.4.0"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"}}},
			"v1.4.0", "0123456789abcdef0123456789abcdef01234567"},
		{"checkout with changes", &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261201174500-b67e5d1abcde+dirty"},
			Settings: []debug.BuildSetting{{Key: "vcs.modified", Value: "true"}, {Key: "vcs.revision", Value: "b67e5d1abcde"}}},
			"v0.0.0-20261201174500-b67e5d1abcde+dirty", "b67e5d1abcde"},
		{"odd characters", &debug.BuildInfo{Main: debug.Module{Version: "v1 (x)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "a)b c"}}}, "v1x", "abc"},
	} {
		got := createdBy(tc.info, tc.info != nil)
		m := parquetJavaCreatedBy.FindStringSubmatch(got)
		if m == nil {
			t.Errorf("%s: %q does not parse as parquet-java's created_by", tc.name, got)
			continue
		}
		if m[1] != "opaltrace" || m[2] != tc.version || m[3] != tc.build {
			t.Errorf("%s: %q parses to application %q, version %q, build %q; want opaltrace, %q, %q",
				tc.name, got, m[1], m[2], m[3], tc.version, tc.build)
		}
	}
	// The form was once the bare name, which parquet-java cannot parse.
	if parquetJavaCreatedBy.MatchString("opaltrace") {
		t.Error("the pattern accepts a bare name: it is not parquet-java's")
	}
}

// The files carry CreatedBy, and arrow-go reads its application and
// version from it as parquet-java does.
func TestFileCreatedBy(t *testing.T) {
	data := writeAll(t, listHeavy(10), WriterOptions{})
	pf, err := file.NewParquetReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	md := pf.MetaData()
	if got := md.GetCreatedBy(); got != CreatedBy {
		t.Fatalf("created_by %q, want %q", got, CreatedBy)
	}
	if v := md.WriterVersion(); v == nil || v.App != "opaltrace" {
		t.Fatalf("arrow-go parses created_by %q as %+v", CreatedBy, v)
	}
}
