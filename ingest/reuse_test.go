package ingest

import (
	"os"
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/internal/shareddata"
	"github.com/opaltrace/opaltrace/trace"
)

// TestMooncakeReuse checks that a Mooncake reader handing out one request
// (Options.Reuse) yields, scan by scan, what one building a request per
// line yields: the same canonical records, hash ids as nil or not, the same
// bad lines; on hand-made lines (hash ids absent after lines that had
// them, null, empty, bad values, blank lines) and on the shared traces.
func TestMooncakeReuse(t *testing.T) {
	inputs := map[string]string{"handmade": strings.Join([]string{
		`{"timestamp": 0, "input_length": 700, "output_length": 5, "hash_ids": [1, 2]}`,
		`{"timestamp": 3, "input_length": 10, "output_length": 1}`,
		``,
		`{"timestamp": 4, "input_length": 10, "output_length": 1, "hash_ids": null}`,
		`{"timestamp": 5, "input_length": -1, "output_length": 1, "hash_ids": [3]}`,
		`{"timestamp": 6, "input_length": 600, "output_length": 2, "hash_ids": []}`,
		`not json`,
		`{"timestamp": 7.5, "input_length": 1100, "output_length": 9, "hash_ids": [4, 5, 6]}`,
		`{"timestamp": 8, "input_length": 20, "output_length": 3}`,
	}, "\n")}
	for _, rel := range []string{convFile, synthFile} {
		if data, err := os.ReadFile(shareddata.Path(t, rel)); err == nil {
			inputs[rel] = string(data)
		}
	}
	type seen struct {
		rec    string
		nilIDs bool
		ids    int
	}
	scan := func(t *testing.T, data string, reuse bool) []seen {
		r, err := NewReader(strings.NewReader(data), "in.jsonl", Options{Format: mooncakeName, Reuse: reuse})
		if err != nil {
			t.Fatal(err)
		}
		var out []seen
		for r.Scan() {
			switch rec := r.Record().(type) {
			case *trace.Request:
				out = append(out, seen{rec.String(), rec.HashIDs == nil, len(rec.HashIDs)})
			case *SyntaxError:
				out = append(out, seen{rec: "bad: " + rec.Error()})
			}
		}
		if err := r.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	for name, data := range inputs {
		t.Run(name, func(t *testing.T) {
			fresh, reused := scan(t, data, false), scan(t, data, true)
			if len(fresh) != len(reused) {
				t.Fatalf("%d records reused, %d fresh", len(reused), len(fresh))
			}
			for i := range fresh {
				if fresh[i] != reused[i] {
					t.Fatalf("record %d: reused\n%+v\nfresh\n%+v", i, reused[i], fresh[i])
				}
			}
		})
	}
}
