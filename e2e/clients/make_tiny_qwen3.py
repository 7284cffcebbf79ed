#!/usr/bin/env python3
"""Writes a tiny random-weight Qwen3-architecture model directory for a CPU
vLLM smoke test: Qwen3ForCausalLM with the real Qwen3 vocabulary (151,936
ids) and 2 small layers, plus the real Qwen3 tokenizer files from
tokenize/testdata/models/qwen3. Nothing is downloaded (HF_HUB_OFFLINE=1).

Usage: make_tiny_qwen3.py OUT_DIR
"""

import gzip
import os
import shutil
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from transformers import Qwen3Config, Qwen3ForCausalLM  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TOK = os.path.join(ROOT, "tokenize", "testdata", "models", "qwen3")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    cfg = Qwen3Config(
        vocab_size=151936,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        torch_dtype="bfloat16",
        bos_token_id=151643,
        eos_token_id=151645,
    )
    model = Qwen3ForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    with gzip.open(os.path.join(TOK, "tokenizer.json.gz"), "rb") as src, open(
        os.path.join(out, "tokenizer.json"), "wb"
    ) as dst:
        shutil.copyfileobj(src, dst)
    shutil.copy(os.path.join(TOK, "tokenizer_config.json"), out)
    print(out)


if __name__ == "__main__":
    main()
