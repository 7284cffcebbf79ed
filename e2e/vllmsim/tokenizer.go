package vllmsim

import "fmt"

// loadTokenizer returns the PromptTokenizer for --tokenizer DIR.
//
// The tokenize package is not in this build yet, so it fails with
// ErrTokenizerUnavailable. Wiring it is this one function: load
// tokenize.Load(dir) and tokenize.LoadChatTemplate(dir) and adapt them to
// PromptTokenizer (ChatPrompt = Encode(RenderOpenAI(body), false), and so on).
func loadTokenizer(dir string) (PromptTokenizer, error) {
	return nil, fmt.Errorf("--tokenizer %s: %w", dir, ErrTokenizerUnavailable)
}
