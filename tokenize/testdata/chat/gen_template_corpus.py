#!/usr/bin/env python3
"""Opt-in breadth check: render a directory of chat templates with the real
reference (transformers' jinja2 environment, as apply_chat_template uses it)
on a fixed set of conversations, for TestTemplateCorpus to compare against.

Usage: python gen_template_corpus.py TEMPLATE_DIR OUT.json
then:  WARMPATH_TEMPLATE_CORPUS=OUT.json go test -run TestTemplateCorpus ./tokenize/
(`go tool task test:templates` does all of this.)

A good TEMPLATE_DIR is vendor/llama.cpp/models/templates from the PyPI sdist of
llama-cpp-python (pip download --no-deps --no-binary :all: llama-cpp-python):
70 real templates. Nothing produced here is committed.
"""
import json, glob, os, sys
from datetime import datetime
import transformers.utils.chat_template_utils as ctu
class FD(datetime):
    @classmethod
    def now(cls, tz=None): return datetime(2026, 3, 14, 15, 9, 26)
ctu.datetime = FD
tools = [{"type": "function", "function": {"name": "get_weather", "description": "Get weather", "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City"}, "days": {"type": "integer", "default": 1}}, "required": ["city"]}}}]
convs = {
 "simple": dict(messages=[{"role": "user", "content": "Hello!"}], add_generation_prompt=True),
 "system_multi": dict(messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Joke?"}], add_generation_prompt=True),
 "nogen": dict(messages=[{"role": "user", "content": "Q"}, {"role": "assistant", "content": "A"}], add_generation_prompt=False),
 "tools": dict(messages=[{"role": "system", "content": "S"}, {"role": "user", "content": "Weather?"}], tools=tools, add_generation_prompt=True),
 "tool_calls": dict(messages=[{"role": "user", "content": "Weather in Paris?"}, {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}]}, {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "18C"}], tools=tools, add_generation_prompt=True),
 "reasoning": dict(messages=[{"role": "user", "content": "Q1"}, {"role": "assistant", "content": "A1", "reasoning_content": "think"}, {"role": "user", "content": "Q2"}], add_generation_prompt=True),
"parts": dict(messages=[{"role": "system", "content": [{"type": "text", "text": "Sys part"}]}, {"role": "user", "content": [{"type": "text", "text": "look"}, {"type": "text", "text": "here"}]}], add_generation_prompt=True),
 "docs": dict(messages=[{"role": "user", "content": "Summarise"}], documents=[{"title": "Doc A", "text": "alpha"}, {"title": "Doc B", "text": "beta"}], add_generation_prompt=True),
 "string_args_multi": dict(messages=[{"role": "user", "content": "Two calls"}, {"role": "assistant", "content": None, "tool_calls": [{"id": "a1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Rome\"}"}}, {"id": "a2", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]}, {"role": "tool", "tool_call_id": "a1", "content": "20C"}, {"role": "tool", "tool_call_id": "a2", "content": "5C"}, {"role": "assistant", "content": "Rome 20C, Oslo 5C."}], tools=tools, add_generation_prompt=False),
 "think_kwargs_off": dict(messages=[{"role": "user", "content": "Q"}], add_generation_prompt=True, kwargs={"enable_thinking": False, "thinking": False, "reasoning_effort": "low"}),
 "think_kwargs_on": dict(messages=[{"role": "user", "content": "Q"}], add_generation_prompt=True, kwargs={"enable_thinking": True, "thinking": True, "reasoning_effort": "high"}),
 "unicode_ws": dict(messages=[{"role": "system", "content": "  padded system \n"}, {"role": "user", "content": "Ünïcödé 😀 <b>&amp;</b> \"q\" 'a'\n\n  trailing  "}, {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nok"}, {"role": "user", "content": "again"}], add_generation_prompt=True),
 "thinking_field": dict(messages=[{"role": "user", "content": "Q1"}, {"role": "assistant", "content": "A1", "thinking": "t1"}, {"role": "user", "content": "Q2"}, {"role": "assistant", "content": "A2", "thinking": "t2"}], add_generation_prompt=False),
"complex_tools": dict(messages=[{"role": "system", "content": "Use tools.\nCarefully."}, {"role": "user", "content": "Plan a trip"}], tools=[
    {"type": "function", "function": {"name": "book", "description": "Book a \"trip\"\nwith options", "parameters": {"type": "object", "properties": {
        "where": {"type": "string", "enum": ["Paris", "Rome"], "description": "City"},
        "when": {"type": ["string", "null"], "description": "ISO date"},
        "people": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}}, "required": ["name"]}},
        "budget": {"anyOf": [{"type": "number"}, {"type": "string"}], "default": 1000.0},
        "flags": {"type": "object", "additionalProperties": {"type": "boolean"}},
        "nested": {"type": "object", "properties": {"deep": {"type": "object", "properties": {"x": {"type": "number", "default": 0.5}}}}}},
        "required": ["where", "people"]}}},
    {"type": "function", "function": {"name": "noop", "description": "", "parameters": {"type": "object", "properties": {}}}}], add_generation_prompt=True),
 "named_and_tool_list": dict(messages=[{"role": "system", "content": "S1"}, {"role": "system", "content": "S2"}, {"role": "user", "content": "hi", "name": "bob"}, {"role": "assistant", "content": "<think>\nx\n</think>\n\nhello", "tool_calls": [{"id": "c9", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Nice"}}}]}, {"role": "tool", "tool_call_id": "c9", "content": [{"type": "text", "text": "sunny"}]}, {"role": "user", "content": "ok"}], tools=tools, add_generation_prompt=True),
 "long_history": dict(messages=[m for i in range(6) for m in ({"role": "user", "content": "question %d" % i}, {"role": "assistant", "content": "answer %d" % i, "reasoning_content": "why %d" % i})] + [{"role": "user", "content": "last"}], add_generation_prompt=True),
}
out = []
for path in sorted(glob.glob(sys.argv[1] + "/*.jinja")):
    src = open(path, encoding="utf-8").read()
    for cname, c in convs.items():
        try:
            r, _ = ctu.render_jinja_template(conversations=[ctu._normalize_chat_messages(c["messages"])], tools=c.get("tools"), chat_template=src,
                                             add_generation_prompt=c["add_generation_prompt"], documents=c.get("documents"), bos_token="<s>", eos_token="</s>", **c.get("kwargs", {}))
            want, err = r[0], None
        except Exception as e:
            want, err = None, type(e).__name__ + ": " + str(e)[:200]
        out.append({"template": os.path.basename(path), "case": cname, "src": src, "conv": c, "want": want, "error": err})
json.dump(out, open(sys.argv[2], "w"), ensure_ascii=False)
print(len(out), sum(1 for o in out if o["error"]))
