package ingest

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"path/filepath"
	"strings"

	"github.com/opaltrace/opaltrace/trace"
)

// agentic reads per-session agent traces such as WEKA's Claude Code traces
// (callanjfox/kv-cache-tester traces/): one JSON object per file, {"id",
// "models", "block_size", "hash_id_scope": "local", "requests": [{"t",
// "type", "model", "in", "out", "hash_ids", "stop", "api_time",
// "ttft", "think_time"}, ...]}. One session per file and one run per
// session; a directory of sessions is one dataset.
//
// Times stay relative to the session start (Arrival = t): sessions carry
// no wall-clock start, and replay decides where to place them (N
// concurrent sessions, or a session arrival rate). think_time (the user's
// or tool's time before the request) is kept as ThinkSec for closed-loop
// replay; api_time is the proxy's whole API call (E2E, stream end) and
// ttft its time to first token, when recorded.
//
// # Hash ids
//
// The file's hash ids are local to its session (equal ids mean an equal
// prefix inside the session only), while ours must be comparable across
// the dataset. Each local id becomes
//
//	splitmix64(fnv1a64(session id) + local id · 0x9E3779B97F4A7C15) with the sign bit cleared
//
// a bijection of the local id for one session, so prefixes inside a
// session are kept, and a 63-bit pseudo-random value across sessions, so
// two sessions (or a session and another dataset's small integers) share
// an id with probability about n²/2⁶⁴. The session id is the file's "id",
// else its base name; the run's HashScope is then "dataset".
const agenticName = "agentic"

var agentic = Format{
	Name:      agenticName,
	Sniff:     sniffAgentic,
	NewReader: newAgenticReader,
}

func sniffAgentic(head []byte) bool {
	return startsWith(head, '{') && containsAll(head, `"block_size"`, `"requests"`, `"hash_ids"`) &&
		containsAny(head, `"hash_id_scope"`, `"think_time"`, `"api_time"`)
}

type agenticRequest struct {
	T         optNum   `json:"t"`
	Type      string   `json:"type"`
	Model     string   `json:"model"`
	In        optNum   `json:"in"`
	Out       optNum   `json:"out"`
	HashIDs   []optNum `json:"hash_ids"`
	Stop      string   `json:"stop"`
	APITime   optNum   `json:"api_time"`
	TTFT      optNum   `json:"ttft"`
	ThinkTime optNum   `json:"think_time"`
}

func newAgenticReader(r io.Reader, file, run string, opts Options) Reader {
	return &batchReader{load: func() ([]Record, []trace.Run, error) {
		b, err := readInput(r, file, opts.maxDocumentBytes())
		if err != nil {
			return nil, nil, err
		}
		recs, runs := parseAgentic(b, file, run)
		return recs, runs, nil
	}}
}

// agenticHash namespaces a session-local hash id (see the doc above).
func agenticHash(seed uint64, local int64) int64 {
	z := seed + uint64(local)*0x9E3779B97F4A7C15
	z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
	z = (z ^ z>>27) * 0x94D049BB133111EB
	z ^= z >> 31
	return int64(z &^ (1 << 63))
}

func parseAgentic(b []byte, file, prefix string) ([]Record, []trace.Run) {
	var top map[string]json.RawMessage
	if bad := unmarshalAt(quoteNonFinite(b), file, &top); bad != nil {
		bad.Msg = "invalid JSON: " + bad.Msg
		return []Record{bad}, nil
	}
	var doc struct {
		ID        string   `json:"id"`
		Models    []string `json:"models"`
		BlockSize optNum   `json:"block_size"`
		Scope     string   `json:"hash_id_scope"`
	}
	if bad := unmarshalAt(quoteNonFinite(b), file, &doc); bad != nil {
		bad.Msg = "session: " + bad.Msg
		return []Record{bad}, nil
	}
	bs, msg := doc.BlockSize.count()
	switch {
	case msg != "":
		return []Record{badAt(file, 1, "block_size: %s", msg)}, nil
	case !bs.OK || bs.V == 0:
		return []Record{badAt(file, 1, "block_size: missing or 0")}, nil
	}
	session := doc.ID
	if session == "" {
		session = strings.TrimSuffix(filepath.Base(file), ".gz")
	}
	run := trace.Run{Name: prefix + "#1", Source: agenticName, File: file,
		BlockSize: bs.V, HashScope: "dataset",
		Extra: map[string]string{"session": session, "hash_id_scope": doc.Scope}}
	if len(doc.Models) == 1 {
		run.Model = doc.Models[0]
	}
	reqsRaw := top["requests"]
	delete(top, "requests")
	run.Reported = reportedJSON(top)
	elems, bad := jsonArray(reqsRaw, file)
	if bad != nil || reqsRaw == nil {
		return []Record{badAt(file, 1, "requests: missing or not an array")}, []trace.Run{run}
	}
	h := fnv.New64a()
	h.Write([]byte(session))
	seed := h.Sum64()
	recs := make([]Record, 0, len(elems))
	for i, e := range elems {
		var a agenticRequest
		if err := json.Unmarshal(e.raw, &a); err != nil {
			recs = append(recs, badAt(file, 1, "requests[%d]: %v", i, err))
			continue
		}
		req := newRequest(&run, "", i, file, i+1)
		req.Session = session
		req.Turn = trace.Some(int64(i))
		if a.Model != "" {
			req.Model = a.Model
		}
		req.FinishReason = a.Stop
		req.BlockSize = bs
		req.OutputTokensSource = trace.OutputServerUsage
		req.E2EBasis = trace.E2EStreamEnd
		req.TTFTBasis = trace.TTFTFirstChunk
		var fe fieldErr
		var msg string
		if !a.T.Set {
			fe.set("t", "missing")
		} else if msg = checkSec(a.T.V); msg == "" && a.T.V > 1e9 {
			msg = fmt.Sprintf("out of range (%v)", a.T.V)
		}
		fe.set("t", msg)
		req.Arrival = trace.Some(trace.TimeFromSeconds(a.T.V))
		req.InputTokens, msg = a.In.count()
		fe.set("in", msg)
		req.OutputTokens, msg = a.Out.count()
		fe.set("out", msg)
		req.E2ESec, msg = a.APITime.sec(1)
		fe.set("api_time", msg)
		req.TTFTSec, msg = a.TTFT.sec(1)
		fe.set("ttft", msg)
		req.ThinkSec, msg = a.ThinkTime.sec(1)
		fe.set("think_time", msg)
		if a.HashIDs != nil {
			req.HashIDs = make([]int64, len(a.HashIDs))
			for j, id := range a.HashIDs {
				v, msg := id.count()
				if msg == "" && !v.OK {
					msg = "null"
				}
				fe.set(fmt.Sprintf("hash_ids[%d]", j), msg)
				req.HashIDs[j] = agenticHash(seed, v.V)
			}
		}
		if fe.msg != "" {
			recs = append(recs, badAt(file, 1, "requests[%d].%s", i, fe.msg))
			continue
		}
		recs = append(recs, validated(req))
	}
	return recs, []trace.Run{run}
}
