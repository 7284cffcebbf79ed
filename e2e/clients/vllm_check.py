#!/usr/bin/env python3
"""Sends chat requests with shared system prompts one at a time through
Envoy to real vLLM workers behind warmpath and checks, for every request,
that warmpath's predicted cached tokens on the worker it chose (POST
/debug/lookup just before sending) equal the cached_tokens vLLM reports in
usage.prompt_tokens_details. Standard library only.

Usage: vllm_check.py ENVOY_URL WARMPATH_ADMIN [--groups 3] [--per-group 4]
Exits 1 on any mismatch or failed request.
"""

import argparse
import json
import random
import sys
import time
import urllib.request

WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike "
         "november oscar papa quebec romeo sierra tango uniform victor whiskey xray").split()


def text(rng, n):
    return " ".join(rng.choice(WORDS) for _ in range(n))


def post(url, body, headers=None):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"content-type": "application/json", **(headers or {})})
    with urllib.request.urlopen(req, timeout=600) as resp:
        return resp.status, dict(resp.headers), json.loads(resp.read())


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("envoy")
    ap.add_argument("admin")
    ap.add_argument("--groups", type=int, default=3)
    ap.add_argument("--per-group", type=int, default=4)
    ap.add_argument("--prefix-words", type=int, default=300)
    ap.add_argument("--settle", type=float, default=0.5, help="seconds to let KV events arrive")
    a = ap.parse_args()
    rng = random.Random(7)
    prefixes = [f"System {g}: " + text(rng, a.prefix_words) for g in range(a.groups)]
    order = [(g, i) for i in range(a.per_group) for g in range(a.groups)]
    bodies = []
    for n, (g, i) in enumerate(order):
        bodies.append((g, {"model": "qwen3", "max_tokens": 8, "temperature": 0,
                           "messages": [{"role": "system", "content": prefixes[g]},
                                        {"role": "user", "content": f"Question {n}: " + text(rng, 40)}]}))
    # Exact repeats: the whole prompt is cached, and vLLM still computes its
    # last token, so it reports fewer cached tokens than the prompt holds.
    bodies += bodies[:2]
    rows, bad = [], 0
    for n, (g, body) in enumerate(bodies):
        _, _, lookup = post(f"http://{a.admin}/debug/lookup",
                            {"model": "qwen3", "path": "/v1/chat/completions", "request": body})
        predicted = {w["name"]: w["cached_tokens"] for w in lookup.get("workers", [])}
        status, headers, resp = post(f"{a.envoy}/v1/chat/completions", body)
        worker = headers.get("x-warmpath-worker") or headers.get("X-Warmpath-Worker")
        usage = resp.get("usage") or {}
        actual = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
        pred = predicted.get(worker)
        ok = status == 200 and actual is not None and pred == actual
        bad += not ok
        rows.append((n, g, worker, lookup.get("chosen"), usage.get("prompt_tokens"),
                     lookup.get("prompt_tokens"), pred, actual, "ok" if ok else "MISMATCH"))
        time.sleep(a.settle)
    print("| # | group | worker | lookup chose | vLLM prompt tokens | warmpath prompt tokens "
          "| predicted cached | vLLM cached_tokens | |")
    print("|---:|---:|---|---|---:|---:|---:|---:|---|")
    for r in rows:
        print("| " + " | ".join(str(x) for x in r) + " |")
    print(f"\n{len(rows) - bad} of {len(rows)} requests: predicted cached tokens == vLLM cached_tokens")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
