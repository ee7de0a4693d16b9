package trace

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
)

// A Run is one benchmark run, one session or one replay inside a dataset,
// with the metadata its requests share. Block size, model and hash scope are
// per run, never per file, so datasets from different sources merge.
type Run struct {
	Name       string `json:"name"`
	Stage      string `json:"stage,omitempty"`
	Source     string `json:"source"`         // input format, or "simulated"
	File       string `json:"file,omitempty"` // input file it was read from
	Model      string `json:"model,omitempty"`
	Engine     string `json:"engine,omitempty"`  // serving engine: vllm or sglang
	Backend    string `json:"backend,omitempty"` // the client's API backend as it named it
	Hardware   string `json:"hardware,omitempty"`
	TP         int    `json:"tp,omitempty"`
	PP         int    `json:"pp,omitempty"`
	DP         int    `json:"dp,omitempty"`
	BlockSize  int64  `json:"block_size,omitempty"`    // tokens per hash_ids entry
	HashScope  string `json:"hash_scope,omitempty"`    // "dataset" when hash ids are comparable across runs
	StartUnixN int64  `json:"start_unix_ns,omitempty"` // wall-clock time of the run's t=0, when known

	// Disaggregated marks a prefill/decode-disaggregated deployment;
	// Speculative a run with speculative decoding (one chunk carries
	// several tokens). Later stages refuse or treat such runs specially.
	Disaggregated bool `json:"disaggregated,omitempty"`
	Speculative   bool `json:"speculative,omitempty"`

	// Approximate says why this run can only be approximated offline
	// (e.g. its dataset is not available), "" when it can be reproduced.
	Approximate string `json:"approximate,omitempty"`

	// DurationSec is the run's benchmark duration as the source measured it
	// (vLLM: from the first dispatch to the last completion), the
	// denominator of its throughputs. Absent when the source has none.
	DurationSec Opt[float64] `json:"-"`

	// Workload is the workload the source says it ran, when recorded.
	Workload *Workload `json:"workload,omitempty"`

	// Reported is the run's own summary as the source wrote it (the
	// source's JSON with the per-request arrays removed).
	Reported json.RawMessage `json:"reported,omitempty"`

	// Extra holds other key/value facts (command-line options, tool version).
	Extra map[string]string `json:"extra,omitempty"`
}

// A Workload is the recorded specification of a benchmark workload, enough
// to regenerate its arrivals and lengths.
type Workload struct {
	Dataset     string  `json:"dataset,omitempty"`
	InputLen    int     `json:"input_len,omitempty"`
	OutputLen   int     `json:"output_len,omitempty"`
	RangeRatio  float64 `json:"range_ratio,omitempty"`
	RequestRate Rate    `json:"request_rate"`
	Burstiness  float64 `json:"burstiness,omitempty"`
	Concurrency int     `json:"concurrency,omitempty"`
	NumPrompts  int     `json:"num_prompts,omitempty"`
}

// A Rate is a request rate in requests per second; +Inf means "all at once",
// as vLLM's "inf" and SGLang's Infinity do. It marshals +Inf as "inf".
type Rate float64

// MarshalJSON writes +Inf as the string "inf".
func (r Rate) MarshalJSON() ([]byte, error) {
	if math.IsInf(float64(r), 1) {
		return []byte(`"inf"`), nil
	}
	return json.Marshal(float64(r))
}

// UnmarshalJSON reads a number or the strings "inf"/"Infinity".
func (r *Rate) UnmarshalJSON(b []byte) error {
	var f float64
	if err := json.Unmarshal(b, &f); err == nil {
		*r = Rate(f)
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("request rate: %s is neither a number nor a string", b)
	}
	switch s {
	case "inf", "Infinity", "+inf", "INF":
		*r = Rate(math.Inf(1))
		return nil
	}
	return fmt.Errorf("request rate: %q is not a rate", s)
}

// runJSON is Run's file form: DurationSec as a nullable number.
type runJSON struct {
	runAlias
	DurationSec *float64 `json:"duration_s,omitempty"`
}

type runAlias Run

// MarshalJSON writes the run with duration_s when present.
func (r Run) MarshalJSON() ([]byte, error) {
	j := runJSON{runAlias: runAlias(r)}
	if r.DurationSec.OK {
		d := r.DurationSec.V
		j.DurationSec = &d
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads the form MarshalJSON writes.
func (r *Run) UnmarshalJSON(b []byte) error {
	var j runJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*r = Run(j.runAlias)
	if j.DurationSec != nil {
		r.DurationSec = Some(*j.DurationSec)
	}
	return nil
}

// CheckSizes returns what in r is over the string limits (MaxStringBytes
// for each string, MaxReportedBytes for Reported), one message each; nil
// when nothing is.
func (r *Run) CheckSizes() []string {
	var msgs []string
	for _, f := range []struct{ name, v string }{
		{"name", r.Name}, {"stage", r.Stage}, {"source", r.Source}, {"file", r.File}, {"model", r.Model},
		{"engine", r.Engine}, {"backend", r.Backend}, {"hardware", r.Hardware}, {"hash_scope", r.HashScope},
		{"approximate", r.Approximate},
	} {
		if len(f.v) > MaxStringBytes {
			msgs = append(msgs, fmt.Sprintf("%s: %d bytes, more than the limit of %d", f.name, len(f.v), MaxStringBytes))
		}
	}
	for _, k := range sortedExtraKeys(r.Extra) {
		if v := r.Extra[k]; len(k)+len(v) > MaxStringBytes {
			msgs = append(msgs, fmt.Sprintf("extra %.40q: %d bytes, more than the limit of %d", k, len(k)+len(v), MaxStringBytes))
		}
	}
	if len(r.Reported) > MaxReportedBytes {
		msgs = append(msgs, fmt.Sprintf("reported summary: %d bytes, more than the limit of %d", len(r.Reported), MaxReportedBytes))
	}
	return msgs
}

func sortedExtraKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
