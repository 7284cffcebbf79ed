package tokenize

import (
	"fmt"
	"strings"

	"github.com/warmpath/warmpath/tokenize/internal/jinja"
)

// RenderOpenAI renders a full OpenAI /v1/chat/completions (or chat-form
// /tokenize) request body to the prompt text vLLM would tokenize. It reads
// messages, tools, documents, add_generation_prompt (default true),
// continue_final_message and chat_template_kwargs; numbers keep their exact
// form (1.0 stays a float, big integers stay exact) and objects keep their
// key order. Errors wrap ErrBadRequest, ErrUnsupportedRequest or ErrTemplate.
func (c *ChatTemplate) RenderOpenAI(body []byte) (string, error) {
	out, err := c.renderOpenAI(body)
	c.metrics.observe("openai", err)
	return out, err
}

func (c *ChatTemplate) renderOpenAI(body []byte) (string, error) {
	v, err := jinja.ParseJSON(body)
	if err != nil {
		return "", fmt.Errorf("parse chat request: %w: %w", ErrBadRequest, err)
	}
	req, ok := v.(*jinja.Dict)
	if !ok {
		return "", fmt.Errorf("parse chat request: body is not an object: %w", ErrBadRequest)
	}
	return c.renderOpenAIRequest(req, len(body))
}

// renderBody is RenderOpenAI (or RenderAnthropic with anthropic) of a body
// parsed before.
func (c *ChatTemplate) renderBody(b *Body, anthropic bool) (string, error) {
	var out string
	var err error
	if anthropic {
		out, err = c.renderAnthropicRequest(b.root, len(b.raw))
		c.metrics.observe("anthropic", err)
	} else {
		out, err = c.renderOpenAIRequest(b.root, len(b.raw))
		c.metrics.observe("openai", err)
	}
	return out, err
}

// renderOpenAIRequest renders a parsed chat request; sizeHint is its
// body's length.
func (c *ChatTemplate) renderOpenAIRequest(req *jinja.Dict, sizeHint int) (string, error) {
	in, err := c.openAIInput(req)
	if err != nil {
		return "", err
	}
	in.SizeHint = sizeHint
	return c.render(in)
}

func (c *ChatTemplate) openAIInput(req *jinja.Dict) (*chatInput, error) {
	if t, ok := req.Get("chat_template"); ok && t != nil {
		return nil, fmt.Errorf("request-supplied chat_template: %w", ErrUnsupportedRequest)
	}
	in := &chatInput{AddGenerationPrompt: true}
	var err error
	if in.AddGenerationPrompt, err = boolField(req, "add_generation_prompt", true); err != nil {
		return nil, err
	}
	if in.ContinueFinalMessage, err = boolField(req, "continue_final_message", false); err != nil {
		return nil, err
	}
	if in.Tools, err = normalizeTools(req); err != nil {
		return nil, err
	}
	if tc, _ := req.Get("tool_choice"); tc == "none" && c.excludeToolsOnNone {
		in.Tools = nil
	}
	if d, ok := req.Get("documents"); ok && d != nil {
		if _, ok := d.(*jinja.List); !ok {
			return nil, fmt.Errorf("documents must be a list: %w", ErrBadRequest)
		}
		in.Documents = d
	}
	if k, ok := req.Get("chat_template_kwargs"); ok && k != nil {
		kd, ok := k.(*jinja.Dict)
		if !ok {
			return nil, fmt.Errorf("chat_template_kwargs must be an object: %w", ErrBadRequest)
		}
		in.Kwargs = kd
	}
	if c.defaultKwargs.Len() > 0 {
		merged := c.defaultKwargs.Clone()
		for _, k := range in.Kwargs.Keys() {
			v, _ := in.Kwargs.Get(k)
			merged.Set(k, v)
		}
		in.Kwargs = merged
	}
	if re, ok := req.Get("reasoning_effort"); ok && re != nil {
		kw := jinja.NewDict(in.Kwargs.Len() + 1)
		kw.Set("reasoning_effort", re)
		for _, k := range in.Kwargs.Keys() {
			v, _ := in.Kwargs.Get(k)
			kw.Set(k, v)
		}
		in.Kwargs = kw
	}
	mv, _ := req.Get("messages")
	ml, ok := mv.(*jinja.List)
	if !ok {
		return nil, fmt.Errorf("messages must be a list: %w", ErrBadRequest)
	}
	name, err := c.pick(in.Tools != nil)
	if err != nil {
		return nil, err
	}
	if in.Messages, err = normalizeMessages(ml, c.openaiContent[name]); err != nil {
		return nil, err
	}
	return in, nil
}

func boolField(d *jinja.Dict, key string, def bool) (bool, error) {
	v, ok := d.Get(key)
	if !ok || v == nil {
		return def, nil
	}
	b, ok := v.(bool)
	if !ok {
		return false, fmt.Errorf("%s must be a boolean: %w", key, ErrBadRequest)
	}
	return b, nil
}

// normalizeTools rebuilds tools as vLLM's pydantic models dump them:
// {"type": "function", "function": {"name", "description", "parameters",
// extra fields...}, extra fields...} with null for missing optional fields.
func normalizeTools(req *jinja.Dict) (jinja.Value, error) {
	tv, ok := req.Get("tools")
	if !ok || tv == nil {
		return nil, nil
	}
	tl, ok := tv.(*jinja.List)
	if !ok {
		return nil, fmt.Errorf("tools must be a list: %w", ErrBadRequest)
	}
	out := &jinja.List{Items: make([]jinja.Value, len(tl.Items))}
	for i, it := range tl.Items {
		t, ok := it.(*jinja.Dict)
		if !ok {
			return nil, fmt.Errorf("tools[%d] must be an object: %w", i, ErrBadRequest)
		}
		typ, ok := t.Get("type")
		if !ok {
			typ = "function"
		}
		if typ != "function" {
			return nil, fmt.Errorf("tools[%d].type must be \"function\": %w", i, ErrBadRequest)
		}
		fv, _ := t.Get("function")
		f, ok := fv.(*jinja.Dict)
		if !ok {
			return nil, fmt.Errorf("tools[%d].function must be an object: %w", i, ErrBadRequest)
		}
		name, _ := f.Get("name")
		if _, ok := name.(string); !ok {
			return nil, fmt.Errorf("tools[%d].function.name must be a string: %w", i, ErrBadRequest)
		}
		nf := jinja.NewDict(f.Len() + 2)
		nf.Set("name", name)
		desc, _ := f.Get("description")
		if _, ok := desc.(string); !ok && desc != nil {
			return nil, fmt.Errorf("tools[%d].function.description must be a string: %w", i, ErrBadRequest)
		}
		nf.Set("description", desc)
		params, _ := f.Get("parameters")
		if _, ok := params.(*jinja.Dict); !ok && params != nil {
			return nil, fmt.Errorf("tools[%d].function.parameters must be an object: %w", i, ErrBadRequest)
		}
		nf.Set("parameters", params)
		for _, k := range f.Keys() {
			if k != "name" && k != "description" && k != "parameters" {
				v, _ := f.Get(k)
				nf.Set(k, v)
			}
		}
		nt := jinja.NewDict(t.Len())
		nt.Set("type", "function")
		nt.Set("function", nf)
		for _, k := range t.Keys() {
			if k != "type" && k != "function" {
				v, _ := t.Get(k)
				nt.Set(k, v)
			}
		}
		out.Items[i] = nt
	}
	return out, nil
}

// normalizeMessages converts request messages to vLLM's conversation form:
// content parts joined with "\n" (or kept as a list of {"type": "text",
// "text"} parts when the template iterates over content), assistant
// tool_calls kept with string arguments parsed into objects, reasoning
// under "reasoning" and "reasoning_content", tool_call_id and name kept.
func normalizeMessages(ml *jinja.List, openaiFormat bool) (*jinja.List, error) {
	out := &jinja.List{Items: make([]jinja.Value, len(ml.Items))}
	for i, it := range ml.Items {
		m, ok := it.(*jinja.Dict)
		if !ok {
			return nil, fmt.Errorf("messages[%d] must be an object: %w", i, ErrBadRequest)
		}
		nm, err := normalizeMessage(m, i, openaiFormat)
		if err != nil {
			return nil, err
		}
		out.Items[i] = nm
	}
	return out, nil
}

// normalizedKey files a message's normalized form on the message
// (jinja.Dict.SetDerived): a message the body parser's cache hands out
// again, turn after turn, is normalized once.
type normalizedKey struct{ openaiFormat bool }

// normalizeMessage is normalizeMessages of the i-th message.
func normalizeMessage(m *jinja.Dict, i int, openaiFormat bool) (*jinja.Dict, error) {
	key := normalizedKey{openaiFormat}
	if v, ok := m.Derived(key); ok {
		return v.(*jinja.Dict), nil
	}
	rv, _ := m.Get("role")
	role, ok := rv.(string)
	if !ok {
		return nil, fmt.Errorf("messages[%d].role must be a string: %w", i, ErrBadRequest)
	}
	cv, _ := m.Get("content")
	texts, err := contentTexts(cv, i)
	if err != nil {
		return nil, err
	}
	nm := jinja.NewDict(6)
	nm.Set("role", role)
	if openaiFormat {
		parts := &jinja.List{Items: make([]jinja.Value, len(texts))}
		for j, t := range texts {
			p := jinja.NewDict(2)
			p.Set("type", "text")
			p.Set("text", t)
			parts.Items[j] = p
		}
		nm.Set("content", parts)
	} else {
		nm.Set("content", strings.Join(texts, "\n"))
	}
	switch role {
	case "assistant":
		if tc, ok := m.Get("tool_calls"); ok && tc != nil {
			calls, err := normalizeToolCalls(tc, i)
			if err != nil {
				return nil, err
			}
			if calls != nil {
				nm.Set("tool_calls", calls)
			}
		}
		// vLLM reads only "reasoning"; a request's "reasoning_content"
		// is dropped before the template sees it.
		if reasoning, _ := m.Get("reasoning"); reasoning != nil {
			if _, ok := reasoning.(string); !ok {
				return nil, fmt.Errorf("messages[%d].reasoning must be a string: %w", i, ErrBadRequest)
			}
			nm.Set("reasoning", reasoning)
			nm.Set("reasoning_content", reasoning)
		}
	case "tool":
		if id, ok := m.Get("tool_call_id"); ok {
			nm.Set("tool_call_id", id)
		}
	}
	if n, ok := m.Get("name"); ok {
		if _, isStr := n.(string); isStr {
			nm.Set("name", n)
		}
	}
	if role == "developer" {
		tools, _ := m.Get("tools")
		nm.Set("tools", tools)
	}
	m.SetDerived(key, nm)
	return nm, nil
}

// contentTexts returns the text parts of a message's content.
func contentTexts(cv jinja.Value, i int) ([]string, error) {
	switch c := cv.(type) {
	case nil:
		return nil, nil
	case string:
		return []string{c}, nil
	case *jinja.List:
		texts := make([]string, 0, len(c.Items))
		for j, p := range c.Items {
			switch part := p.(type) {
			case string:
				texts = append(texts, part)
			case *jinja.Dict:
				tv, _ := part.Get("type")
				switch tv {
				case "text", "input_text", "output_text", "refusal":
					key := "text"
					if tv == "refusal" {
						key = "refusal"
					}
					t, _ := part.Get(key)
					if t == nil {
						continue // vLLM skips a text part without text, with a warning
					}
					ts, ok := t.(string)
					if !ok {
						return nil, fmt.Errorf("messages[%d].content[%d].%s must be a string: %w", i, j, key, ErrBadRequest)
					}
					texts = append(texts, ts)
				default:
					return nil, fmt.Errorf("messages[%d].content[%d] of type %v: %w", i, j, tv, ErrUnsupportedRequest)
				}
			default:
				return nil, fmt.Errorf("messages[%d].content[%d] must be an object: %w", i, j, ErrBadRequest)
			}
		}
		return texts, nil
	}
	return nil, fmt.Errorf("messages[%d].content must be a string or a list: %w", i, ErrBadRequest)
}

// normalizeToolCalls copies tool calls with their arguments as objects, as
// vLLM's _postprocess_messages does: a JSON string is parsed; empty, null,
// malformed or non-object arguments become {} (vLLM logs a warning and
// carries on, so a bad call in the history cannot fail every later turn).
// An empty list gives nil: vLLM drops it so templates take the plain
// assistant path. Entries that are not function calls are an error.
func normalizeToolCalls(tc jinja.Value, i int) (jinja.Value, error) {
	tl, ok := tc.(*jinja.List)
	if !ok {
		return tc, nil
	}
	if len(tl.Items) == 0 {
		return nil, nil
	}
	out := &jinja.List{Items: make([]jinja.Value, len(tl.Items))}
	for j, it := range tl.Items {
		call, ok := it.(*jinja.Dict)
		if !ok {
			return nil, fmt.Errorf("messages[%d].tool_calls[%d] must be an object: %w", i, j, ErrBadRequest)
		}
		fv, _ := call.Get("function")
		f, ok := fv.(*jinja.Dict)
		if typ, has := call.Get("type"); !ok || (has && typ != "function") {
			return nil, fmt.Errorf("messages[%d].tool_calls[%d] must be a function call: %w", i, j, ErrBadRequest)
		}
		nf := f.Clone()
		args, _ := f.Get("arguments")
		var parsed jinja.Value
		switch a := args.(type) {
		case *jinja.Dict:
			parsed = a
		case string:
			if v, err := jinja.ParseJSON([]byte(a)); err == nil {
				parsed = v
			}
		}
		if _, isObj := parsed.(*jinja.Dict); !isObj {
			parsed = jinja.NewDict(0)
		}
		nf.Set("arguments", parsed)
		nc := call.Clone()
		nc.Set("function", nf)
		out.Items[j] = nc
	}
	return out, nil
}
