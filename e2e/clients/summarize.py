#!/usr/bin/env python3
"""Summarizes e2e/clients/run.sh: each tool's own reported TTFT next to the
same statistic recomputed from its per-request records, with a bootstrap
95% confidence interval of the median, in wall milliseconds and converted
to simulated seconds (wall x time scale). Standard library only."""

import argparse
import json
import os
import random
import sys


def percentile(xs, q):
    """Linear-interpolation percentile (numpy's default) of a sorted list."""
    if not xs:
        return float("nan")
    pos = (len(xs) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def median_ci(xs, seed=1, rounds=2000):
    """Percentile-bootstrap 95% interval of the median."""
    rng = random.Random(seed)
    meds = sorted(percentile(sorted(rng.choices(xs, k=len(xs))), 0.5) for _ in range(rounds))
    return percentile(meds, 0.025), percentile(meds, 0.975)


def load_replay(out):
    rep = json.load(open(os.path.join(out, "replay", "warmpath.json")))
    run = rep["runs"][0]
    reqs = [r for r in run["requests"] if r.get("status") == 200 and not r.get("error")]
    s = run["summary"]["ttft_s"]
    return {
        "ttft": [r["ttft_ns"] / 1e9 for r in reqs],
        "prompt": sum(r.get("prompt_tokens", 0) for r in reqs),
        "cached": sum(r.get("cached_tokens", 0) for r in reqs),
        "sent": len(run["requests"]),
        "reported": (s["p50"], s["p90"], s["mean"]),
    }


def load_guidellm(out):
    d = json.load(open(os.path.join(out, "guidellm", "benchmarks.json")))
    b = d["benchmarks"][0]
    ok = b["requests"]["successful"]
    t = b["metrics"]["time_to_first_token_ms"]["successful"]
    return {
        "ttft": [r["time_to_first_token_ms"] / 1e3 for r in ok],
        "prompt": sum(r.get("prompt_tokens") or 0 for r in ok),
        "cached": sum(r.get("cached_tokens") or 0 for r in ok),
        "sent": len(ok) + len(b["requests"]["errored"]) + len(b["requests"]["incomplete"]),
        "reported": (t["percentiles"]["p50"] / 1e3, t["percentiles"]["p90"] / 1e3, t["mean"] / 1e3),
    }


def load_inference_perf(out):
    base = os.path.join(out, "inference-perf", "reports")
    reqs = json.load(open(os.path.join(base, "per_request_lifecycle_metrics.json")))
    ok = [r for r in reqs if not r.get("error")]
    ttft, prompt, cached = [], 0, 0
    for r in ok:
        resp = (r.get("info") or {}).get("response_metrics") or {}
        times = resp.get("output_token_times") or []
        if times:
            ttft.append(times[0] - r["start_time"])
        usage = resp.get("server_usage") or {}
        prompt += usage.get("prompt_tokens") or 0
        cached += (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    s = json.load(open(os.path.join(base, "summary_lifecycle_metrics.json")))
    t = s["successes"]["latency"]["time_to_first_token"]
    return {
        "ttft": ttft,
        "prompt": prompt,
        "cached": cached,
        "sent": len(reqs),
        "reported": (t["median"], t["p90"], t["mean"]),
    }


def engine_ttft(out, tool):
    """Mean TTFT the simulated engines recorded during the run (simulated
    seconds), from their vllm:time_to_first_token_seconds histograms scraped
    after the warm-up request and after the run."""
    total = {"sum": 0.0, "count": 0.0}
    for i in range(16):
        after = os.path.join(out, tool, f"sim{i}-metrics.txt")
        before = os.path.join(out, tool, f"sim{i}-before.txt")
        if not os.path.exists(after):
            break
        for path, sign in ((after, 1), (before, -1)):
            if not os.path.exists(path):
                continue
            for line in open(path):
                for key in total:
                    if line.startswith(f"vllm:time_to_first_token_seconds_{key}"):
                        total[key] += sign * float(line.rsplit(" ", 1)[1])
    return total["sum"] / total["count"] if total["count"] else float("nan")


LOADERS = {"replay": load_replay, "guidellm": load_guidellm, "inference-perf": load_inference_perf}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", required=True)
    ap.add_argument("--time-scale", type=float, required=True)
    ap.add_argument("tools", nargs="+")
    a = ap.parse_args()
    k = a.time_scale
    rows, cis, failed = [], {}, []
    for tool in a.tools:
        try:
            r = LOADERS[tool](a.out)
        except (OSError, KeyError, ValueError, IndexError) as e:
            rows.append(f"| {tool} | no result: {type(e).__name__}: {e} |||||||||||")
            failed.append(tool)
            continue
        xs = sorted(r["ttft"])
        lo, hi = median_ci(xs)
        cis[tool] = (lo, hi)
        p50, p90, mean = r["reported"]
        hit = r["cached"] / r["prompt"] if r["prompt"] else float("nan")
        if len(xs) < r["sent"]:
            failed.append(tool)
        rows.append(
            f"| {tool} | {len(xs)}/{r['sent']} | {p50*1e3:.1f} | {p90*1e3:.1f} | {mean*1e3:.1f} "
            f"| {percentile(xs, 0.5)*1e3:.1f} [{lo*1e3:.1f}, {hi*1e3:.1f}] "
            f"| {p50*k:.3f} | {p90*k:.3f} | {mean*k:.3f} | {engine_ttft(a.out, tool):.3f} | {hit:.1%} |"
        )
    print(f"Time scale {k:g}: simulated seconds = wall seconds x {k:g}.\n")
    print("| tool | ok/sent | TTFT p50 ms (tool) | p90 ms (tool) | mean ms (tool) "
          "| p50 ms recomputed [95% CI] | p50 sim s | p90 sim s | mean sim s | engine mean sim s | cache hit |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    print("\n".join(rows))
    if "replay" in cis:
        lo0, hi0 = cis["replay"]
        print()
        for tool, (lo, hi) in cis.items():
            if tool == "replay":
                continue
            overlap = lo <= hi0 and lo0 <= hi
            print(f"- {tool} vs replay: median 95% CIs {'overlap' if overlap else 'do NOT overlap'}")
            if not overlap:
                failed.append(tool)
    if failed:
        print(f"\nFAILED: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
