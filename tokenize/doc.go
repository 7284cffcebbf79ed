// Package tokenize turns prompt text into the token ids a vLLM worker will
// compute for it.
//
// Load reads a Hugging Face tokenizer.json and builds a Tokenizer that is
// exact with the Rust tokenizers library (the library vLLM uses through
// transformers) for the byte-level BPE families (Qwen 2/2.5/3, Llama 3,
// DeepSeek V3, GPT-OSS) and the SentencePiece-style BPE files with byte
// fallback (Llama 2, Gemma 3, and the Metaspace form of newer Llama 2 and
// Mistral files): normalizers (NFC, Prepend, Replace, Sequence), the Split
// pre-tokenizer regexes of these models as hand-written scanners, ByteLevel,
// Metaspace, BPE merges in both file formats, ignore_merges, added tokens
// with their flags, and the post-processor. A file that uses anything else
// is rejected with an error wrapping ErrUnsupported rather than tokenized
// approximately.
//
// The scanners are exact with Oniguruma as the Rust library uses it,
// including its traps: \s+(?!\S) backtracking, the case fold of U+017F in
// (?i:'s), and plain (not stream-safe) NFC for long runs of combining marks.
// Character classes come from Go's unicode package (Unicode 15.0).
//
// PrefixCache re-tokenizes only the new tail of a text that extends one it
// has seen, which is what multi-turn conversations do. RemoteClient asks a
// vLLM worker's /tokenize endpoint when no local tokenizer is configured.
package tokenize
