package ingest

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/klauspost/compress/gzip"

	"github.com/opaltrace/opaltrace/trace"
)

// A Format is one input format: its name (the --format value), a test on
// the first bytes of an input, and a constructor for its Reader.
type Format struct {
	Name string
	// Sniff reports whether head, the first up to SniffLen bytes of an
	// (uncompressed) input, looks like this format. head may end mid-record.
	Sniff func(head []byte) bool
	// NewReader returns a Reader of r. file names the input in errors;
	// run is the prefix of the run names (see Options.Run).
	NewReader func(r io.Reader, file, run string, opts Options) Reader
}

// formats is the registry, in sniffing order: the first format whose Sniff
// accepts an input reads it.
//
// Note: an explicit table, not init() registration (style.md §3), so the
// order in which formats are tried is visible in one place.
var formats = []Format{sglangBench, vllmBench, sglangMetrics, sglangTrace, otlp, vllmEngine, mooncake,
	aiperf, genAIPerf, guideLLM, llmperf, inferencePerf, lmbenchmark, azure, burstGPT, agentic, opal}

// SniffLen is how many bytes Detect peeks at.
const SniffLen = 8 << 10

// Names returns the names of the supported formats in sniffing order.
func Names() []string {
	names := make([]string, len(formats))
	for i, f := range formats {
		names[i] = f.Name
	}
	return names
}

// Lookup returns the format called name.
func Lookup(name string) (Format, bool) {
	for _, f := range formats {
		if f.Name == name {
			return f, true
		}
	}
	return Format{}, false
}

// Options control how inputs are read.
type Options struct {
	// Format is the format name; "" or "auto" detects it.
	Format string
	// BlockSize is the number of tokens per hash_ids entry for formats
	// that do not record it (mooncake); 0 means 512, Mooncake's.
	BlockSize int64
	// Run is the prefix of the run names of one input; "" means the
	// file's base name. A run is named PREFIX#N for the Nth run in the
	// file (1-based).
	Run string
	// MaxErrors is how many bad records Files accepts before it stops
	// with ErrTooManyErrors; 0 means no limit.
	MaxErrors int
	// MaxLineBytes bounds a line of a line-oriented format (Mooncake,
	// AIPerf, OTLP, SGLang's logs): a longer line is a bad record, read
	// past without being held. 0 means DefaultMaxLineBytes.
	MaxLineBytes int
	// MaxDocumentBytes bounds an input of a whole-document format (a JSON
	// document read whole: vLLM's and SGLang's bench results, GenAI-Perf,
	// GuideLLM, LLMPerf, inference-perf, agentic sessions, Opal): a larger
	// input is a fatal error, read no further. It bounds the files read
	// beside an input as well (summaries, meta.json, timeseries.csv). 0 means
	// DefaultMaxDocumentBytes.
	MaxDocumentBytes int64
	// Reuse lets a reader hand out one Request again and again, its
	// fields and lists valid until the next Scan, for a caller that
	// copies what it keeps (as Record's contract asks). Readers that
	// build each request anew ignore it.
	//
	// Note: replay copies each request into its input columns; the
	// Mooncake reader's fresh request and hash ids per line, 15 MB for
	// the 12,031 lines of the conversation trace, made it take 1.5–2
	// times as long (BenchmarkMooncake, fresh 29–75 ms against reuse
	// 17–41 ms a read, at load 13–15).
	Reuse bool

	// Facts a file may not record, given on the command line (--model,
	// --hardware, --tp, --engine, --engine-version, --engine-opt) and
	// kept in the metadata of every run read: they fill what the file
	// leaves blank, and a value that contradicts the file is a fatal
	// error (see runmeta.go).
	Model    string
	Hardware string
	Engine   string // serving engine: vllm or sglang
	// EngineVersion is the engine's release ("0.8.3", "v0.4.0.post1"),
	// kept as Run.Extra["engine_version"], where files that record it
	// put it.
	EngineVersion string
	TP            int
	EngineOpts    map[string]string // engine options, kept as Run.Extra["engine_opt.K"]
}

// DefaultMaxLineBytes is the longest line read when Options.MaxLineBytes
// is 0: 64 MiB, a thousand times the longest line of any real trace in
// ../shared/data (an AIPerf record with its ITL list), and small enough
// that a line and what it decodes into stay far under a GiB.
const DefaultMaxLineBytes = 64 << 20

// DefaultMaxDocumentBytes is the largest whole document read when
// Options.MaxDocumentBytes is 0: 256 MiB, two hundred times the largest
// document in ../shared/data (a 1.3-MB vLLM result of 1,000 requests), and
// small enough that a document and what it decodes into stay near a GiB.
const DefaultMaxDocumentBytes = 256 << 20

func (o Options) maxDocumentBytes() int64 {
	if o.MaxDocumentBytes > 0 {
		return o.MaxDocumentBytes
	}
	return DefaultMaxDocumentBytes
}

func (o Options) maxLineBytes() int {
	if o.MaxLineBytes > 0 {
		return o.MaxLineBytes
	}
	return DefaultMaxLineBytes
}

func (o Options) blockSize() int64 {
	if o.BlockSize > 0 {
		return o.BlockSize
	}
	return 512
}

// A Record is what a Reader yields: a good *trace.Request, a bad record
// as *SyntaxError, or a *Warning about the records around it.
type Record interface {
	Pos() (file string, line int)
}

// A Reader reads the records of one input, in order.
//
// Scan advances to the next record and reports whether there is one; it
// returns false at the end of the input or on a fatal (I/O) error, which
// Err then returns. Record returns the current record; a *trace.Request is
// valid only until the next Scan (Clone it to keep it). Runs returns the
// runs read so far, in file order; after Scan has returned false it holds
// every run of the input, including runs with no requests.
type Reader interface {
	Scan() bool
	Record() Record
	Err() error
	Runs() []trace.Run
}

// Open opens the file at path ("-" is standard input) and returns a Reader
// of it in the format opts.Format, or in the detected format. Gzip input is
// decompressed transparently. The caller closes the returned Closer.
func Open(path string, opts Options) (Reader, io.Closer, error) {
	var f io.ReadCloser
	if path == "-" {
		f = io.NopCloser(os.Stdin)
	} else {
		file, err := os.Open(path)
		if err != nil {
			return nil, nil, err
		}
		f = file
	}
	r, err := NewReader(f, path, opts)
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return r, f, nil
}

// NewReader returns a Reader of r, which it names file in errors, in the
// format opts.Format or in the detected one.
func NewReader(r io.Reader, file string, opts Options) (Reader, error) {
	br, format, err := Detect(r, file, opts.Format)
	if err != nil {
		return nil, err
	}
	return withRunMeta(format.NewReader(br, file, runPrefix(opts.Run, file), opts), file, opts), nil
}

// Detect returns a reader of the uncompressed input and its format: the one
// called name, or, when name is "" or "auto", the first format whose Sniff
// accepts the first SniffLen bytes.
func Detect(r io.Reader, file, name string) (io.Reader, Format, error) {
	br := bufio.NewReaderSize(r, SniffLen)
	magic, err := br.Peek(2)
	if err != nil && err != io.EOF {
		return nil, Format{}, fmt.Errorf("%s: %w", file, err)
	}
	if bytes.Equal(magic, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, Format{}, fmt.Errorf("%s: gzip: %w", file, err)
		}
		br = bufio.NewReaderSize(zr, SniffLen)
	}
	if name != "" && name != "auto" {
		f, ok := Lookup(name)
		if !ok {
			return nil, Format{}, fmt.Errorf("unknown format %q (known: %s)", name, strings.Join(Names(), ", "))
		}
		return br, f, nil
	}
	head, err := br.Peek(SniffLen)
	if err != nil && err != io.EOF && err != bufio.ErrBufferFull {
		return nil, Format{}, fmt.Errorf("%s: %w", file, err)
	}
	if len(bytes.TrimSpace(head)) == 0 {
		return nil, Format{}, fmt.Errorf("%s: empty file: %w", file, ErrUnrecognized)
	}
	for _, f := range formats {
		if f.Sniff(head) {
			return br, f, nil
		}
	}
	return nil, Format{}, fmt.Errorf("%s: %w (tried %s); use --format", file, ErrUnrecognized, strings.Join(Names(), ", "))
}
