package vllmsim

import (
	"fmt"

	"github.com/warmpath/warmpath/tokenize"
)

// loadTokenizer returns the PromptTokenizer for --tokenizer DIR: the same
// tokenizer.json and chat template warmpath uses, so simulator and router
// see identical ids, as a real vLLM and warmpath do.
func loadTokenizer(dir string) (PromptTokenizer, error) {
	tok, err := tokenize.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("--tokenizer %s: %w", dir, err)
	}
	t := &dirTokenizer{tok: tok}
	// A tokenizer without a chat template still serves completions.
	t.tmpl, t.tmplErr = tokenize.LoadChatTemplate(dir)
	return t, nil
}

// dirTokenizer adapts package tokenize to PromptTokenizer.
type dirTokenizer struct {
	tok     *tokenize.Tokenizer
	tmpl    *tokenize.ChatTemplate
	tmplErr error
}

func (t *dirTokenizer) ChatPrompt(body []byte) ([]uint32, error) {
	if t.tmpl == nil {
		return nil, t.tmplErr
	}
	text, err := t.tmpl.RenderOpenAI(body)
	if err != nil {
		return nil, err
	}
	return t.tok.Encode(text, false), nil
}

func (t *dirTokenizer) AnthropicPrompt(body []byte) ([]uint32, error) {
	if t.tmpl == nil {
		return nil, t.tmplErr
	}
	text, err := t.tmpl.RenderAnthropic(body)
	if err != nil {
		return nil, err
	}
	return t.tok.Encode(text, false), nil
}

func (t *dirTokenizer) TextPrompt(text string, addSpecialTokens bool) ([]uint32, error) {
	return t.tok.Encode(text, addSpecialTokens), nil
}

func (t *dirTokenizer) Decode(ids []uint32) (string, error) { return t.tok.Decode(ids), nil }
