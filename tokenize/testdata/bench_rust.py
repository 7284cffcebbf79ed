#!/usr/bin/env python3
"""Times the Rust tokenizers library (PyPI `tokenizers`) on a corpus, single
thread. Used by TestCompareRust (bench_test.go) so both run in one go.

Usage: bench_rust.py TOKENIZER_JSON[.gz] CORPUS[.gz] RUNS
Prints one JSON object: tokens, bytes, cold_s (fresh tokenizer, empty word
cache; best of RUNS), warm_s (same tokenizer again; best of RUNS), load_s;
all in process CPU seconds, as the machine may be shared.
"""
import gzip, json, os, sys, time

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
import tokenizers


def read(p):
    return gzip.open(p, 'rb').read() if p.endswith('.gz') else open(p, 'rb').read()


def main():
    tj = read(sys.argv[1]).decode('utf-8')
    corpus = read(sys.argv[2]).decode('utf-8')
    runs = int(sys.argv[3])
    cold, warm, load = [], [], []
    n = 0
    for _ in range(runs):
        t0 = time.process_time()
        tk = tokenizers.Tokenizer.from_str(tj)
        load.append(time.process_time() - t0)
        t0 = time.process_time()
        n = len(tk.encode(corpus, add_special_tokens=False).ids)
        cold.append(time.process_time() - t0)
        t0 = time.process_time()
        tk.encode(corpus, add_special_tokens=False)
        warm.append(time.process_time() - t0)
    print(json.dumps({"tokens": n, "bytes": len(corpus.encode()), "cold_s": min(cold), "warm_s": min(warm),
                      "load_s": min(load), "version": tokenizers.__version__}))


if __name__ == '__main__':
    main()
