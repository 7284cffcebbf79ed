package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/warmpath/warmpath/e2e/vllmsim"
	"github.com/warmpath/warmpath/tokenize"
)

// words writes pseudo-English text: words drawn from a fixed vocabulary of
// syllable compounds, with punctuation and paragraph breaks, so the BPE
// tokenizer sees text of realistic density (about 1.5 tokens per word).
type words struct {
	rng   *rand.Rand
	vocab []string
}

func newWords(seed uint64) *words {
	syl := strings.Fields("ka ri to men sal ve or an ti lo pe dra nu sen el ca mo ber ist ion ly ta re de in com pro con tra")
	common := strings.Fields("the of and to in is that for it as with was on be by this are or from at which an have not but")
	rng := rand.New(rand.NewPCG(seed, 7))
	v := slices.Clone(common)
	for range 3000 {
		n := 1 + rng.IntN(3)
		var b strings.Builder
		for range n {
			b.WriteString(syl[rng.IntN(len(syl))])
		}
		v = append(v, b.String())
	}
	return &words{rng: rng, vocab: v}
}

// text returns about n words.
func (w *words) text(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			switch r := w.rng.IntN(40); {
			case r == 0:
				b.WriteString(".\n\n")
			case r < 4:
				b.WriteString(". ")
			case r < 6:
				b.WriteString(", ")
			default:
				b.WriteByte(' ')
			}
		}
		if w.rng.IntN(3) == 0 {
			b.WriteString(w.vocab[w.rng.IntN(28)])
		} else {
			b.WriteString(w.vocab[w.rng.IntN(len(w.vocab))])
		}
	}
	b.WriteByte('.')
	return b.String()
}

type message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// chatBody is an OpenAI chat request as clients of a vLLM pool send it.
func chatBody(msgs []message, maxTokens int) []byte {
	b, _ := json.Marshal(map[string]any{
		"model": "qwen3", "messages": msgs, "stream": true, "max_tokens": maxTokens, "temperature": 0.7,
		"stream_options": map[string]bool{"include_usage": true},
	})
	return b
}

// request is one prepared request: its body, and the prompt's tokens and
// block hashes for the KV events of the engine it lands on.
type request struct {
	body   []byte
	tokens []uint32
	hashes []vllmsim.BlockHash
}

// familyWorkload is many conversations sharing a few long prefixes: each
// family's system prompt and earlier turns, then one of many user messages.
// Requests are drawn at random; a request's tokens are its family's prefix
// followed by its message's tokens, checked against the tokenizer.
type familyWorkload struct {
	families  [][]message
	prefix    [][]uint32            // per family, the tokens every one of its requests starts with
	prefixH   [][]vllmsim.BlockHash // their full blocks' hashes
	tails     []string
	tailIDs   [][]uint32
	maxTokens int

	heads    [][]byte // per family, its body up to the last message
	tailJSON [][]byte // per message, its JSON
	suffix   []byte   // the body after the last message
}

// newFamilyWorkload prepares families of about prefixWords words of shared
// conversation (a system prompt and turns) and nTails user messages of
// about tailWords words.
func newFamilyWorkload(ctx context.Context, p *tokenize.Pipeline, seed uint64, families, prefixWords, turns, nTails, tailWords, maxTokens int) (*familyWorkload, error) {
	w := newWords(seed)
	fw := &familyWorkload{maxTokens: maxTokens}
	for f := range families {
		msgs := []message{{"system", fmt.Sprintf("You are assistant %d. ", f) + w.text(prefixWords/(turns+1))}}
		for t := range turns {
			role := "user"
			if t%2 == 1 {
				role = "assistant"
			}
			msgs = append(msgs, message{role, w.text(prefixWords / (turns + 1))})
		}
		if turns%2 == 1 { // the history ends with an assistant turn
			msgs = append(msgs, message{"assistant", w.text(20)})
		}
		fw.families = append(fw.families, msgs)
	}
	for i := range nTails {
		fw.tails = append(fw.tails, fmt.Sprintf("%s %d: ", w.vocab[28+i%2000], i)+w.text(tailWords))
	}
	ids := func(f, t int) ([]uint32, error) {
		ids, _, err := p.Tokenize(ctx, tokenize.KindChat, fw.build(f, t), "")
		return ids, err
	}
	for f := range fw.families {
		a, err := ids(f, 0)
		if err != nil {
			return nil, err
		}
		b, err := ids(f, 1)
		if err != nil {
			return nil, err
		}
		n := 0
		for n < len(a) && n < len(b) && a[n] == b[n] {
			n++
		}
		fw.prefix = append(fw.prefix, a[:n])
		fw.prefixH = append(fw.prefixH, vllmsim.NewChainHasher("").Extend(nil, a[:n], 16))
	}
	for t := range fw.tails {
		a, err := ids(0, t)
		if err != nil {
			return nil, err
		}
		fw.tailIDs = append(fw.tailIDs, a[len(fw.prefix[0]):])
	}
	if err := fw.prepareJSON(); err != nil {
		return nil, err
	}
	// A request's tokens are built, not tokenized, at run time: check the
	// construction against the tokenizer.
	rng := rand.New(rand.NewPCG(seed, 9))
	for range 16 {
		f, t := rng.IntN(families), rng.IntN(nTails)
		want, err := ids(f, t)
		if err != nil {
			return nil, err
		}
		if got := fw.tokens(f, t); !slices.Equal(got, want) {
			return nil, fmt.Errorf("family %d message %d: built tokens differ from the tokenizer's (%d vs %d)", f, t, len(got), len(want))
		}
	}
	return fw, nil
}

func (fw *familyWorkload) build(f, t int) []byte {
	msgs := append(slices.Clone(fw.families[f]), message{"user", fw.tails[t]})
	return chatBody(msgs, fw.maxTokens)
}

// body is build's bytes, put together from JSON prepared once per family
// and message, so the driver spends its CPU playing Envoy, not encoding.
func (fw *familyWorkload) body(f, t int) []byte {
	head, tail := fw.heads[f], fw.tailJSON[t]
	b := make([]byte, 0, len(head)+len(tail)+len(fw.suffix))
	return append(append(append(b, head...), tail...), fw.suffix...)
}

// prepareJSON splits build(f, t) into a family head, a message and a
// suffix common to all, and checks that they join to it.
func (fw *familyWorkload) prepareJSON() error {
	marker := `\u0000split\u0000` // how json.Marshal writes the NULs below
	for f := range fw.families {
		b := string(chatBody(append(slices.Clone(fw.families[f]), message{"user", "\x00split\x00"}), fw.maxTokens))
		i := strings.Index(b, `{"role":"user","content":"`+marker+`"}`)
		if i < 0 {
			return fmt.Errorf("family %d: cannot split its body", f)
		}
		fw.heads = append(fw.heads, []byte(b[:i]))
		fw.suffix = []byte(b[i+len(`{"role":"user","content":"`+marker+`"}`):])
	}
	for t := range fw.tails {
		m, err := json.Marshal(message{"user", fw.tails[t]})
		if err != nil {
			return err
		}
		fw.tailJSON = append(fw.tailJSON, m)
	}
	for f := range min(4, len(fw.families)) {
		if got, want := fw.body(f, f), fw.build(f, f); string(got) != string(want) {
			return fmt.Errorf("family %d: the prepared body differs from the encoded one", f)
		}
	}
	return nil
}

func (fw *familyWorkload) tokens(f, t int) []uint32 {
	return append(slices.Clone(fw.prefix[f]), fw.tailIDs[t]...)
}

// next draws a request: a family and a message at random.
func (fw *familyWorkload) next(rng *rand.Rand) request {
	f, t := rng.IntN(len(fw.families)), rng.IntN(len(fw.tails))
	toks := fw.tokens(f, t)
	h := vllmsim.NewChainHasher("").Extend(slices.Clip(fw.prefixH[f]), toks, 16)
	return request{body: fw.body(f, t), tokens: toks, hashes: h}
}

// promptWords is about how many words a prompt of n tokens holds.
func promptWords(tokens int) int { return tokens * 55 / 100 }

// conversation grows one chat turn by turn, for the CPU of long prompts:
// each request is the previous one plus what the growth adds.
type conversation struct {
	w    *words
	msgs []message
}

func newConversation(seed uint64, tokens int) *conversation {
	c := &conversation{w: newWords(seed)}
	c.msgs = []message{{"system", fmt.Sprintf("Session %d. ", seed) + c.w.text(800)}}
	for n := 800; n < promptWords(tokens); {
		c.msgs = append(c.msgs, message{"user", c.w.text(300)}, message{"assistant", c.w.text(500)})
		n += 800
	}
	c.msgs = append(c.msgs, message{"user", c.w.text(200)})
	return c
}

// Growth patterns of a conversation between two requests.
const (
	growReply = "reply" // the assistant's reply to the last message, then a new user message
	growUser  = "user"  // only a new user message (the client resends after an edit, or a tool result)
)

func (c *conversation) grow(how string) {
	if how == growReply {
		c.msgs = append(c.msgs, message{"assistant", c.w.text(300)})
	}
	c.msgs = append(c.msgs, message{"user", c.w.text(150)})
}

func (c *conversation) body() []byte { return chatBody(c.msgs, 64) }
