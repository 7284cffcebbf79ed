"""Generate vLLM-format /metrics expositions with the real prometheus_client.

The metric names, help strings, label names and histogram buckets follow
vLLM's v1 PrometheusStatLogger (vllm/v1/metrics/loggers.py) and the HTTP
metrics of prometheus-fastapi-instrumentator that `vllm serve` also exposes.
Values are made up but plausible. The text is produced by prometheus_client's
own generate_latest, so the format (float spelling, _total/_created handling,
label escaping, HELP/TYPE lines) is exactly what a vLLM server sends.

Usage: python gen_vllm_metrics.py   (writes *.prom and the values they
hold, *.want.json, beside this file)
"""

import json
import os
import random

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client import gc_collector, platform_collector, process_collector

HERE = os.path.dirname(os.path.abspath(__file__))

TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]
ITL_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0,
               2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0]
LATENCY_BUCKETS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
                   40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0]
ITER_BUCKETS = [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]


def build_1_2_5(limit):
    out, exp = [], 0
    while True:
        for m in (1, 2, 5):
            v = m * 10 ** exp
            if v > limit:
                return out
            out.append(v)
        exp += 1


def http_collectors(reg, rnd):
    reqs = Counter("http_requests", "Total number of requests by method, status and handler.",
                   ["method", "status", "handler"], registry=reg)
    highr = Histogram("http_request_duration_highr_seconds",
                      "Latency with many buckets but no API specific labels. Made for more accurate percentile calculations. ",
                      buckets=[0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 2.5, 3, 3.5, 4, 4.5, 5,
                               7.5, 10, 30, 60], registry=reg)
    dur = Histogram("http_request_duration_seconds",
                    "Latency with only few buckets by handler. Made to be only used if aggregation by handler is important. ",
                    ["handler", "method"], buckets=[0.1, 0.5, 1], registry=reg)
    for handler in ("/v1/chat/completions", "/v1/completions", "/health", "/metrics", "/tokenize"):
        n = rnd.randint(10, 5000)
        reqs.labels("POST" if handler.startswith("/v1") or handler == "/tokenize" else "GET", "2xx", handler).inc(n)
        for _ in range(20):
            v = rnd.expovariate(2.0)
            highr.observe(v)
            dur.labels(handler, "GET").observe(v)


def engine_collectors(reg, model, engines, rnd, legacy):
    labels = ["model_name", "engine"]
    running = Gauge("vllm:num_requests_running", "Number of requests in model execution batches.", labels, registry=reg)
    waiting = Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", labels, registry=reg)
    if not legacy:
        kv = Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", labels, registry=reg)
    gpu = Gauge("vllm:gpu_cache_usage_perc",
                "GPU KV-cache usage. 1 means 100 percent usage.DEPRECATED: Use vllm:kv_cache_usage_perc instead.",
                labels, registry=reg)
    prefix = "vllm:gpu_prefix_cache" if legacy else "vllm:prefix_cache"
    queries = Counter(prefix + "_queries", "Prefix cache queries, in terms of number of queried tokens.", labels, registry=reg)
    hits = Counter(prefix + "_hits", "Prefix cache hits, in terms of number of cached tokens.", labels, registry=reg)
    preempt = Counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.", labels, registry=reg)
    prompt = Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", labels, registry=reg)
    gen = Counter("vllm:generation_tokens", "Number of generation tokens processed.", labels, registry=reg)
    success = Counter("vllm:request_success", "Count of successfully processed requests.",
                      labels + ["finished_reason"], registry=reg)
    hists = [
        Histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.", labels,
                  buckets=build_1_2_5(32768), registry=reg),
        Histogram("vllm:request_generation_tokens", "Number of generation tokens processed.", labels,
                  buckets=build_1_2_5(32768), registry=reg),
        Histogram("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", labels,
                  buckets=ITER_BUCKETS, registry=reg),
        Histogram("vllm:request_max_num_generation_tokens", "Histogram of maximum number of requested generation tokens.",
                  labels, buckets=build_1_2_5(32768), registry=reg),
        Histogram("vllm:request_params_n", "Histogram of the n request parameter.", labels,
                  buckets=[1, 2, 5, 10, 20], registry=reg),
        Histogram("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", labels,
                  buckets=build_1_2_5(32768), registry=reg),
        Histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", labels,
                  buckets=TTFT_BUCKETS, registry=reg),
        Histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", labels,
                  buckets=ITL_BUCKETS, registry=reg),
        Histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", labels,
                  buckets=LATENCY_BUCKETS, registry=reg),
        Histogram("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", labels,
                  buckets=LATENCY_BUCKETS, registry=reg),
        Histogram("vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.", labels,
                  buckets=LATENCY_BUCKETS, registry=reg),
        Histogram("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", labels,
                  buckets=LATENCY_BUCKETS, registry=reg),
        Histogram("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", labels,
                  buckets=LATENCY_BUCKETS, registry=reg),
    ]
    want = {"running": 0, "waiting": 0, "kv_cache_usage": 0.0, "prefix_cache_queries": 0,
            "prefix_cache_hits": 0, "preemptions": 0, "engines": len(engines)}
    for e in engines:
        lv = (model, e)
        r, w = rnd.randint(0, 64), rnd.randint(0, 16)
        running.labels(*lv).set(r)
        waiting.labels(*lv).set(w)
        usage = round(rnd.random(), 6)
        if not legacy:
            kv.labels(*lv).set(usage)
        gpu.labels(*lv).set(usage)
        q = rnd.randint(100000, 9000000)
        h = rnd.randint(0, q)
        pre = rnd.randint(0, 40)
        queries.labels(*lv).inc(q)
        hits.labels(*lv).inc(h)
        preempt.labels(*lv).inc(pre)
        want["running"] += r
        want["waiting"] += w
        want["kv_cache_usage"] += usage / len(engines)
        want["prefix_cache_queries"] += q
        want["prefix_cache_hits"] += h
        want["preemptions"] += pre
        prompt.labels(*lv).inc(q)
        gen.labels(*lv).inc(rnd.randint(1000, 900000))
        for reason in ("stop", "length", "abort"):
            success.labels(model, e, reason).inc(rnd.randint(0, 900))
        for h in hists:
            for _ in range(30):
                h.labels(*lv).observe(rnd.expovariate(0.5) * 100)
    return want


def info_collectors(reg, engines, block_size, algo, lora):
    keys = {
        "block_size": str(block_size),
        "cache_dtype": "auto",
        "calculate_kv_scales": "False",
        "cpu_offload_gb": "0",
        "enable_prefix_caching": "True",
        "gpu_memory_utilization": "0.9",
        "is_attention_free": "False",
        "num_cpu_blocks": "None",
        "num_gpu_blocks": "27306",
        "num_gpu_blocks_override": "None",
        "prefix_caching_hash_algo": algo,
        "sliding_window": "None",
        "swap_space": "4",
        "swap_space_bytes": "4294967296",
    }
    info = Gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
                 list(keys) + ["engine"], registry=reg)
    for e in engines:
        info.labels(**keys, engine=e).set(1)
    if lora:
        g = Gauge("vllm:lora_requests_info", "Running stats on lora requests.",
                  ["max_lora", "waiting_lora_adapters", "running_lora_adapters"], registry=reg)
        # Stale label sets linger: the value is the time they were last set.
        g.labels("4", "", "sql-lora").set(1764400000.25)
        g.labels("4", "chat-lora", "sql-lora,math-lora").set(1764400123.5)
        return {"max_lora": 4, "running": ["sql-lora", "math-lora"], "waiting": ["chat-lora"]}
    return None


def render(name, model, engines, seed, block_size=16, algo="sha256", lora=False, legacy=False, process=True):
    rnd = random.Random(seed)
    reg = CollectorRegistry()
    if process:
        gc_collector.GCCollector(registry=reg)
        platform_collector.PlatformCollector(registry=reg)
        process_collector.ProcessCollector(registry=reg)
    http_collectors(reg, rnd)
    want = engine_collectors(reg, model, engines, rnd, legacy)
    want["lora"] = info_collectors(reg, engines, block_size, algo, lora)
    want["cache_config"] = {"block_size": block_size, "num_gpu_blocks": 27306,
                            "prefix_caching": True, "hash_algo": algo}
    want["kv_blocks"] = 27306 * len(engines)
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(generate_latest(reg))
    with open(os.path.join(HERE, name.replace(".prom", ".want.json")), "w") as f:
        json.dump(want, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    render("vllm-single.prom", "Qwen/Qwen3-8B", ["0"], seed=1, lora=True)
    render("vllm-dp2.prom", "qwen3", ["0", "1"], seed=2, block_size=32, algo="xxhash")
    render("vllm-legacy.prom", "meta-llama/Llama-3.1-8B-Instruct", ["0"], seed=3, legacy=True, process=False)
