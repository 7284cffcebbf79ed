package replay

import (
	"encoding/json"
	"fmt"
	"strings"
)

// message is one chat message.
type message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// conversation is what a session has said so far: each finished turn's
// user text and the reply, in both word and token-id form.
type conversation struct {
	turns []exchange
}

type exchange struct {
	user  Text
	reply string // reply text as received (or generated)
	ids   []int  // reply as token ids, for token-id prompts
}

// requestBody builds the JSON body for turn t of s. With s.Accumulate the
// finished turns in conv are carried before it.
func requestBody(w *WorkloadConfig, s *Session, t int, conv *conversation) ([]byte, error) {
	turn := s.Turns[t]
	var past []exchange
	if s.Accumulate {
		past = conv.turns
	}
	body := map[string]any{
		"model":      w.Model,
		"max_tokens": turn.MaxTokens,
		"stream":     true,
	}
	if w.API != APIMessages {
		body["stream_options"] = map[string]any{"include_usage": true}
	}
	if w.IgnoreEOS {
		body["ignore_eos"] = true
	}
	if w.CacheSalt != "" {
		body["cache_salt"] = w.CacheSalt
	}
	switch w.API {
	case APICompletions:
		if w.TokenIDs {
			n := s.Prefix.Len() + turn.User.Len()
			for _, e := range past {
				n += e.user.Len() + len(e.ids)
			}
			ids := s.Prefix.appendIDs(make([]int, 0, n))
			for _, e := range past {
				ids = e.user.appendIDs(ids)
				ids = append(ids, e.ids...)
			}
			body["prompt"] = turn.User.appendIDs(ids)
		} else {
			var parts []string
			if s.Prefix.Len() > 0 {
				parts = append(parts, s.Prefix.String())
			}
			for _, e := range past {
				parts = append(parts, e.user.String(), e.reply)
			}
			parts = append(parts, turn.User.String())
			body["prompt"] = strings.Join(parts, " ")
		}
	default:
		var msgs []message
		if s.Prefix.Len() > 0 {
			if w.API == APIMessages {
				body["system"] = s.Prefix.String()
			} else {
				msgs = append(msgs, message{Role: "system", Content: s.Prefix.String()})
			}
		}
		for _, e := range past {
			msgs = append(msgs, message{Role: "user", Content: e.user.String()}, message{Role: "assistant", Content: e.reply})
		}
		msgs = append(msgs, message{Role: "user", Content: turn.User.String()})
		body["messages"] = msgs
	}
	b, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("encode request body: %w", err)
	}
	return b, nil
}
