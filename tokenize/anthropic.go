package tokenize

import (
	"fmt"
	"strings"

	"github.com/warmpath/warmpath/tokenize/internal/jinja"
)

// RenderAnthropic renders an Anthropic /v1/messages request body to the
// prompt text vLLM renders for it. vLLM converts the request to its OpenAI
// chat form first: the system prompt and system-role messages (strings, or
// text blocks) are concatenated into one system message; non-empty text
// blocks become text parts (a single text part becomes plain content);
// thinking blocks become the message's reasoning; tool_use blocks become
// tool_calls whose arguments are the block's input; tool_result blocks in
// user turns become tool messages, elsewhere text parts "Tool result: ...";
// tools become OpenAI function tools; output_config.effort becomes
// reasoning_effort. Images, and tool_use blocks without an id (vLLM invents
// a time-based one), give ErrUnsupportedRequest. Errors wrap ErrBadRequest,
// ErrUnsupportedRequest or ErrTemplate.
func (c *ChatTemplate) RenderAnthropic(body []byte) (string, error) {
	out, err := c.renderAnthropic(body)
	c.metrics.observe("anthropic", err)
	return out, err
}

func (c *ChatTemplate) renderAnthropic(body []byte) (string, error) {
	v, err := jinja.ParseJSON(body)
	if err != nil {
		return "", fmt.Errorf("parse messages request: %w: %w", ErrBadRequest, err)
	}
	req, ok := v.(*jinja.Dict)
	if !ok {
		return "", fmt.Errorf("parse messages request: body is not an object: %w", ErrBadRequest)
	}
	return c.renderAnthropicRequest(req, len(body))
}

// renderAnthropicRequest renders a parsed Messages request; sizeHint is its
// body's length.
func (c *ChatTemplate) renderAnthropicRequest(req *jinja.Dict, sizeHint int) (string, error) {
	oreq, err := anthropicToOpenAI(req)
	if err != nil {
		return "", err
	}
	return c.renderOpenAIRequest(oreq, sizeHint)
}

// anthropicToOpenAI builds the OpenAI chat request vLLM derives from a
// Messages request (vllm/entrypoints/anthropic/serving.py,
// _convert_anthropic_to_openai_request).
func anthropicToOpenAI(req *jinja.Dict) (*jinja.Dict, error) {
	msgs := &jinja.List{}
	mv, _ := req.Get("messages")
	ml, ok := mv.(*jinja.List)
	if !ok {
		return nil, fmt.Errorf("messages must be a list: %w", ErrBadRequest)
	}
	system, err := anthropicSystem(req, ml)
	if err != nil {
		return nil, err
	}
	if system != "" {
		sm := jinja.NewDict(2)
		sm.Set("role", "system")
		sm.Set("content", system)
		msgs.Items = append(msgs.Items, sm)
	}
	for i, it := range ml.Items {
		m, ok := it.(*jinja.Dict)
		if !ok {
			return nil, fmt.Errorf("messages[%d] must be an object: %w", i, ErrBadRequest)
		}
		converted, err := anthropicMessage(m, i)
		if err != nil {
			return nil, err
		}
		msgs.Items = append(msgs.Items, converted.Items...)
	}
	out := jinja.NewDict(4)
	out.Set("messages", msgs)
	if kw, ok := req.Get("chat_template_kwargs"); ok {
		out.Set("chat_template_kwargs", kw)
	}
	if oc, ok := req.Get("output_config"); ok {
		if ocd, ok := oc.(*jinja.Dict); ok {
			if effort, ok := ocd.Get("effort"); ok && effort != nil {
				out.Set("reasoning_effort", effort)
			}
		}
	}
	if tv, ok := req.Get("tools"); ok && tv != nil {
		tl, ok := tv.(*jinja.List)
		if !ok {
			return nil, fmt.Errorf("tools must be a list: %w", ErrBadRequest)
		}
		tools := &jinja.List{}
		for i, t := range tl.Items {
			td, ok := t.(*jinja.Dict)
			if !ok {
				return nil, fmt.Errorf("tools[%d] must be an object: %w", i, ErrBadRequest)
			}
			name, _ := td.Get("name")
			desc, _ := td.Get("description")
			schema, _ := td.Get("input_schema")
			f := jinja.NewDict(4)
			f.Set("name", name)
			f.Set("description", desc)
			f.Set("parameters", schema)
			if dl, ok := td.Get("defer_loading"); ok && dl != nil {
				f.Set("defer_loading", dl)
			}
			ot := jinja.NewDict(2)
			ot.Set("type", "function")
			ot.Set("function", f)
			tools.Items = append(tools.Items, ot)
		}
		out.Set("tools", tools)
	}
	return out, nil
}

// anthropicKey files a Messages request's message in OpenAI form on the
// message (jinja.Dict.SetDerived): a message the body parser's cache hands
// out again is converted once, and its conversion, the same dicts every
// time, is normalized once too.
type anthropicKey struct{}

// anthropicMessage converts the i-th message of a Messages request to the
// OpenAI messages vLLM makes of it: none for a system message (its text
// goes to the system prompt), a tool message per tool result, and the
// message itself unless it is a user message left without content.
func anthropicMessage(m *jinja.Dict, i int) (*jinja.List, error) {
	if v, ok := m.Derived(anthropicKey{}); ok {
		return v.(*jinja.List), nil
	}
	done := func(l *jinja.List) *jinja.List {
		m.SetDerived(anthropicKey{}, l)
		return l
	}
	role, _ := m.Get("role")
	rs, ok := role.(string)
	if !ok {
		return nil, fmt.Errorf("messages[%d].role must be a string: %w", i, ErrBadRequest)
	}
	if rs == "system" {
		return done(&jinja.List{}), nil
	}
	om := jinja.NewDict(4)
	om.Set("role", rs)
	content, _ := m.Get("content")
	if s, ok := content.(string); ok {
		om.Set("content", s)
		return done(&jinja.List{Items: []jinja.Value{om}}), nil
	}
	blocks, ok := content.(*jinja.List)
	if !ok {
		return nil, fmt.Errorf("messages[%d].content must be a string or a list: %w", i, ErrBadRequest)
	}
	out := &jinja.List{}
	parts := &jinja.List{}
	calls := &jinja.List{}
	reasoning := ""
	hasReasoning := false
	for j, b := range blocks.Items {
		bd, ok := b.(*jinja.Dict)
		if !ok {
			return nil, fmt.Errorf("messages[%d].content[%d] must be an object: %w", i, j, ErrBadRequest)
		}
		typ, _ := bd.Get("type")
		switch typ {
		case "text":
			tv, _ := bd.Get("text")
			if tv == nil || tv == "" {
				continue
			}
			ts, ok := tv.(string)
			if !ok {
				return nil, fmt.Errorf("messages[%d].content[%d].text must be a string: %w", i, j, ErrBadRequest)
			}
			parts.Items = append(parts.Items, textPart(ts))
		case "image":
			return nil, fmt.Errorf("messages[%d].content[%d] is an image: %w", i, j, ErrUnsupportedRequest)
		case "thinking":
			tv, _ := bd.Get("thinking")
			if tv == nil {
				continue
			}
			ts, ok := tv.(string)
			if !ok {
				return nil, fmt.Errorf("messages[%d].content[%d].thinking must be a string: %w", i, j, ErrBadRequest)
			}
			reasoning += ts
			hasReasoning = true
		case "tool_use":
			id, _ := bd.Get("id")
			if !truth(id) {
				return nil, fmt.Errorf("messages[%d].content[%d]: tool_use without id gets a time-based id: %w", i, j, ErrUnsupportedRequest)
			}
			name, _ := bd.Get("name")
			if !truth(name) {
				name = ""
			}
			input, _ := bd.Get("input")
			if !truth(input) {
				input = jinja.NewDict(0)
			}
			f := jinja.NewDict(2)
			f.Set("name", name)
			// vLLM sends json.dumps(input); its chat path parses it back.
			f.Set("arguments", input)
			call := jinja.NewDict(3)
			call.Set("id", id)
			call.Set("type", "function")
			call.Set("function", f)
			calls.Items = append(calls.Items, call)
		case "tool_result":
			rc, _ := bd.Get("content")
			if rs != "user" {
				text := ""
				if truth(rc) {
					text = jinja.Str(rc)
				}
				parts.Items = append(parts.Items, textPart("Tool result: "+text))
				continue
			}
			text, err := toolResultText(rc, i, j)
			if err != nil {
				return nil, err
			}
			id, _ := bd.Get("tool_use_id")
			if !truth(id) {
				id = ""
			}
			tm := jinja.NewDict(3)
			tm.Set("role", "tool")
			tm.Set("tool_call_id", id)
			tm.Set("content", text)
			out.Items = append(out.Items, tm)
		}
		// redacted_thinking, tool_reference and unknown blocks are skipped, as vLLM does.
	}
	if hasReasoning {
		om.Set("reasoning", reasoning)
	}
	if len(calls.Items) > 0 {
		om.Set("tool_calls", calls)
	}
	switch {
	case len(parts.Items) == 1:
		t, _ := parts.Items[0].(*jinja.Dict).Get("text")
		om.Set("content", t)
	case len(parts.Items) > 1:
		om.Set("content", parts)
	}
	if _, has := om.Get("content"); rs == "user" && !has {
		return done(out), nil
	}
	out.Items = append(out.Items, om)
	return done(out), nil

}

// anthropicSystem joins, without separator, the top-level system prompt and
// the text of system-role messages, dropping Claude Code's per-request
// billing header block as vLLM does.
func anthropicSystem(req *jinja.Dict, ml *jinja.List) (string, error) {
	var parts []string
	addBlocks := func(l *jinja.List, where string) error {
		for i, b := range l.Items {
			bd, ok := b.(*jinja.Dict)
			if !ok {
				return fmt.Errorf("%s[%d] must be an object: %w", where, i, ErrBadRequest)
			}
			if t, _ := bd.Get("type"); t != "text" {
				continue
			}
			tv, _ := bd.Get("text")
			ts, ok := tv.(string)
			if tv != nil && !ok {
				return fmt.Errorf("%s[%d].text must be a string: %w", where, i, ErrBadRequest)
			}
			if ts == "" || strings.HasPrefix(ts, "x-anthropic-billing-header") {
				continue
			}
			parts = append(parts, ts)
		}
		return nil
	}
	if sys, ok := req.Get("system"); ok && truth(sys) {
		switch s := sys.(type) {
		case string:
			parts = append(parts, s)
		case *jinja.List:
			if err := addBlocks(s, "system"); err != nil {
				return "", err
			}
		default:
			return "", fmt.Errorf("system must be a string or a list of blocks: %w", ErrBadRequest)
		}
	}
	for i, it := range ml.Items {
		m, ok := it.(*jinja.Dict)
		if !ok {
			continue
		}
		if r, _ := m.Get("role"); r != "system" {
			continue
		}
		content, _ := m.Get("content")
		switch c := content.(type) {
		case string:
			parts = append(parts, c)
		case *jinja.List:
			if err := addBlocks(c, fmt.Sprintf("messages[%d].content", i)); err != nil {
				return "", err
			}
		}
	}
	return strings.Join(parts, ""), nil
}

// toolResultText is the content vLLM gives the tool message made from a
// user's tool_result block: the string itself, or its text items joined with
// "\n". Images and tool references add messages this package does not build.
func toolResultText(rc jinja.Value, i, j int) (string, error) {
	switch c := rc.(type) {
	case string:
		return c, nil
	case *jinja.List:
		var texts []string
		for _, item := range c.Items {
			d, ok := item.(*jinja.Dict)
			if !ok {
				continue
			}
			switch t, _ := d.Get("type"); t {
			case "text":
				tv, _ := d.Get("text")
				ts, _ := tv.(string)
				texts = append(texts, ts)
			case "image", "tool_reference":
				return "", fmt.Errorf("messages[%d].content[%d] tool_result holds %v: %w", i, j, t, ErrUnsupportedRequest)
			}
		}
		return strings.Join(texts, "\n"), nil
	}
	return "", nil
}

func textPart(s string) *jinja.Dict {
	p := jinja.NewDict(2)
	p.Set("type", "text")
	p.Set("text", s)
	return p
}
