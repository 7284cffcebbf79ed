package tokenize

import (
	"fmt"

	"github.com/warmpath/warmpath/tokenize/internal/jinja"
)

// RenderAnthropic renders an Anthropic /v1/messages request body to the
// prompt text vLLM renders for it. vLLM converts the request to its OpenAI
// chat form first: the system prompt (a string, or text blocks concatenated)
// becomes a system message; text blocks become text parts (a single text
// part becomes plain content); tool_use blocks become tool_calls whose
// arguments are the block's input; tool_result blocks in user turns become
// tool messages, elsewhere text parts "Tool result: ..."; tools become
// OpenAI function tools. Errors wrap ErrBadRequest, ErrUnsupported or
// ErrTemplate.
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
	oreq, err := anthropicToOpenAI(req)
	if err != nil {
		return "", err
	}
	in, err := c.openAIInput(oreq)
	if err != nil {
		return "", err
	}
	return c.render(in)
}

// anthropicToOpenAI builds the OpenAI chat request vLLM derives from a
// Messages request.
func anthropicToOpenAI(req *jinja.Dict) (*jinja.Dict, error) {
	msgs := &jinja.List{}
	if sys, ok := req.Get("system"); ok && truth(sys) {
		sm := jinja.NewDict(2)
		sm.Set("role", "system")
		switch s := sys.(type) {
		case string:
			sm.Set("content", s)
		case *jinja.List:
			text := ""
			for i, b := range s.Items {
				bd, ok := b.(*jinja.Dict)
				if !ok {
					return nil, fmt.Errorf("system[%d] must be an object: %w", i, ErrBadRequest)
				}
				if t, _ := bd.Get("type"); t == "text" {
					tv, _ := bd.Get("text")
					ts, ok := tv.(string)
					if !ok {
						return nil, fmt.Errorf("system[%d].text must be a string: %w", i, ErrBadRequest)
					}
					text += ts
				}
			}
			sm.Set("content", text)
		default:
			return nil, fmt.Errorf("system must be a string or a list of blocks: %w", ErrBadRequest)
		}
		msgs.Items = append(msgs.Items, sm)
	}
	mv, _ := req.Get("messages")
	ml, ok := mv.(*jinja.List)
	if !ok {
		return nil, fmt.Errorf("messages must be a list: %w", ErrBadRequest)
	}
	for i, it := range ml.Items {
		m, ok := it.(*jinja.Dict)
		if !ok {
			return nil, fmt.Errorf("messages[%d] must be an object: %w", i, ErrBadRequest)
		}
		role, _ := m.Get("role")
		rs, ok := role.(string)
		if !ok {
			return nil, fmt.Errorf("messages[%d].role must be a string: %w", i, ErrBadRequest)
		}
		om := jinja.NewDict(3)
		om.Set("role", rs)
		content, _ := m.Get("content")
		if s, ok := content.(string); ok {
			om.Set("content", s)
			msgs.Items = append(msgs.Items, om)
			continue
		}
		blocks, ok := content.(*jinja.List)
		if !ok {
			return nil, fmt.Errorf("messages[%d].content must be a string or a list: %w", i, ErrBadRequest)
		}
		parts := &jinja.List{}
		calls := &jinja.List{}
		for j, b := range blocks.Items {
			bd, ok := b.(*jinja.Dict)
			if !ok {
				return nil, fmt.Errorf("messages[%d].content[%d] must be an object: %w", i, j, ErrBadRequest)
			}
			typ, _ := bd.Get("type")
			switch typ {
			case "text":
				tv, _ := bd.Get("text")
				if !truth(tv) {
					continue
				}
				ts, ok := tv.(string)
				if !ok {
					return nil, fmt.Errorf("messages[%d].content[%d].text must be a string: %w", i, j, ErrBadRequest)
				}
				parts.Items = append(parts.Items, textPart(ts))
			case "tool_use":
				id, _ := bd.Get("id")
				if !truth(id) {
					return nil, fmt.Errorf("messages[%d].content[%d]: tool_use without id gets a time-based id: %w", i, j, ErrUnsupported)
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
				f.Set("arguments", input)
				call := jinja.NewDict(3)
				call.Set("id", id)
				call.Set("type", "function")
				call.Set("function", f)
				calls.Items = append(calls.Items, call)
			case "tool_result":
				rc, _ := bd.Get("content")
				text := ""
				if truth(rc) {
					text = jinja.Str(rc)
				}
				if rs == "user" {
					id, _ := bd.Get("tool_use_id")
					if !truth(id) {
						id = ""
					}
					tm := jinja.NewDict(3)
					tm.Set("role", "tool")
					tm.Set("tool_call_id", id)
					tm.Set("content", text)
					msgs.Items = append(msgs.Items, tm)
				} else {
					parts.Items = append(parts.Items, textPart("Tool result: "+text))
				}
			default:
				return nil, fmt.Errorf("messages[%d].content[%d] of type %v: %w", i, j, typ, ErrUnsupported)
			}
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
		case len(calls.Items) == 0:
			continue
		}
		msgs.Items = append(msgs.Items, om)
	}
	out := jinja.NewDict(4)
	out.Set("messages", msgs)
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
			f := jinja.NewDict(3)
			f.Set("name", name)
			f.Set("description", desc)
			f.Set("parameters", schema)
			ot := jinja.NewDict(2)
			ot.Set("type", "function")
			ot.Set("function", f)
			tools.Items = append(tools.Items, ot)
		}
		out.Set("tools", tools)
	}
	return out, nil
}

func textPart(s string) *jinja.Dict {
	p := jinja.NewDict(2)
	p.Set("type", "text")
	p.Set("text", s)
	return p
}
