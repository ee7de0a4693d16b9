package ingest

import (
	"fmt"
	"regexp"
	"strconv"

	"github.com/opaltrace/opaltrace/trace"
)

// Engines are the serving engines Options.Engine and Run.Engine name.
var Engines = []string{"vllm", "sglang"}

// EngineOptPrefix prefixes the Run.Extra keys of Options.EngineOpts.
const EngineOptPrefix = "engine_opt."

// EngineVersionKey is the Run.Extra key of the engine's release, as the
// files that record it give it and as Options.EngineVersion sets it.
const EngineVersionKey = "engine_version"

// engineVersionRE matches the releases vLLM and SGLang name: a major and
// minor number, then anything (a patch, "post1", "rc0", ".dev358",
// "+cu128").
var engineVersionRE = regexp.MustCompile(`^v?\d+\.\d+([.+\-a-z0-9]*)$`)

// A runMetaReader adds the run metadata given on the command line
// (Options.Model, Hardware, Engine, EngineVersion, TP, EngineOpts) to the runs and requests
// of another Reader.
//
// Note: the command line fills what the file leaves blank; it never
// silently overrides what the file recorded. A contradiction (--engine vllm
// on a file whose server_info says SGLang) is a fatal error, because one of
// the two is wrong and we cannot tell which.
type runMetaReader struct {
	Reader
	file string
	opts Options
	err  error
}

// withRunMeta wraps r when opts carries command-line run metadata.
func withRunMeta(r Reader, file string, opts Options) Reader {
	if opts.Model == "" && opts.Hardware == "" && opts.Engine == "" && opts.EngineVersion == "" && opts.TP == 0 && len(opts.EngineOpts) == 0 {
		return r
	}
	m := &runMetaReader{Reader: r, file: file, opts: opts}
	if err := checkRunMeta(opts); err != nil {
		m.err = fmt.Errorf("%s: %w", file, err)
	}
	return m
}

// checkRunMeta checks the command-line metadata itself.
func checkRunMeta(opts Options) error {
	if opts.Engine != "" {
		ok := false
		for _, e := range Engines {
			ok = ok || e == opts.Engine
		}
		if !ok {
			return fmt.Errorf("engine: %q is not one of %v", opts.Engine, Engines)
		}
	}
	if v := opts.EngineVersion; v != "" && !engineVersionRE.MatchString(v) {
		return fmt.Errorf("engine-version: %q is not a release such as 0.8.3 or v0.4.0.post1", v)
	}
	if opts.TP < 0 {
		return fmt.Errorf("tp: negative (%d)", opts.TP)
	}
	for k := range opts.EngineOpts {
		if k == "" {
			return fmt.Errorf("engine-opt: empty key")
		}
	}
	return nil
}

func (m *runMetaReader) Err() error {
	if m.err != nil {
		return m.err
	}
	return m.Reader.Err()
}

func (m *runMetaReader) Scan() bool {
	if m.err != nil {
		return false
	}
	if !m.Reader.Scan() {
		m.Runs() // report contradictions in runs without requests too
		return false
	}
	if q, ok := m.Reader.Record().(*trace.Request); ok && m.opts.Model != "" {
		switch q.Model {
		case "":
			q.Model = m.opts.Model
		case m.opts.Model:
		default:
			m.conflict(q.Run, "model", q.Model, m.opts.Model)
			return false
		}
	}
	return true
}

func (m *runMetaReader) conflict(run, field, inFile, given string) {
	if m.err == nil {
		m.err = fmt.Errorf("%s: run %s: %s: the file says %q, the command line %q", m.file, run, field, inFile, given)
	}
}

// Runs returns the wrapped reader's runs with the command-line metadata.
func (m *runMetaReader) Runs() []trace.Run {
	in := m.Reader.Runs()
	out := make([]trace.Run, len(in))
	for i, run := range in {
		fill := func(field string, dst *string, v string) {
			switch {
			case v == "" || *dst == v:
			case *dst == "":
				*dst = v
			default:
				m.conflict(run.Name, field, *dst, v)
			}
		}
		fill("model", &run.Model, m.opts.Model)
		fill("hardware", &run.Hardware, m.opts.Hardware)
		fill("engine", &run.Engine, m.opts.Engine)
		if m.opts.TP != 0 {
			switch run.TP {
			case 0:
				run.TP = m.opts.TP
			case m.opts.TP:
			default:
				m.conflict(run.Name, "tp", strconv.Itoa(run.TP), strconv.Itoa(m.opts.TP))
			}
		}
		version := run.Extra[EngineVersionKey]
		fill("engine version", &version, m.opts.EngineVersion)
		if len(m.opts.EngineOpts) > 0 || m.opts.EngineVersion != "" {
			extra := make(map[string]string, len(run.Extra)+len(m.opts.EngineOpts)+1)
			for k, v := range run.Extra {
				extra[k] = v
			}
			for k, v := range m.opts.EngineOpts {
				extra[EngineOptPrefix+k] = v
			}
			if version != "" {
				extra[EngineVersionKey] = version
			}
			run.Extra = extra
		}
		out[i] = run
	}
	return out
}
