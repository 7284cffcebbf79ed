#!/usr/bin/env bash
# Runs the seed-shaped scenario (shared system-prompt prefixes, 512-token
# prompts, 256-token outputs, a modest constant rate) through
# Envoy -> warmpath -> 3 simulated vLLM workers with three independent
# clients: warmpath's replayer, GuideLLM and inference-perf. Each tool gets a
# fresh stack (new simulators, new warmpath, new Envoy), so no tool's
# cached prefixes help the next. Prints a table of each tool's TTFT.
#
# Usage: e2e/clients/run.sh [replay] [guidellm] [inference-perf]   (default: all three)
# Environment: TIME_SCALE (1: see README.md for why the check uses real
#   time; 10 runs the engines ten times faster), RATE (wall requests/s, 1), REQUESTS (60),
#   PREFIX_TOKENS (2048), PREFIX_COUNT (4), OUT (e2e/out/clients),
#   VENV (.venv-clients, with requirements-clients.txt), ENVOY (the binary).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
TIME_SCALE=${TIME_SCALE:-1}
RATE=${RATE:-1}
REQUESTS=${REQUESTS:-60}
PREFIX_TOKENS=${PREFIX_TOKENS:-2048}
PREFIX_COUNT=${PREFIX_COUNT:-4}
OUT=${OUT:-$ROOT/e2e/out/clients}
VENV=${VENV:-$ROOT/.venv-clients}
TOOLS=("$@")
[ ${#TOOLS[@]} -gt 0 ] || TOOLS=(replay guidellm inference-perf)

mkdir -p "$OUT/bin" "$OUT/logs"
BIN=$OUT/bin
go build -o "$BIN/" ./cmd/warmpath ./e2e/cmd/vllm-sim ./e2e/cmd/replay

if [ -z "${ENVOY:-}" ]; then
  ENVOY=$(ls "$ROOT"/.venv/lib/python3*/site-packages/envoy/_bin/envoy 2>/dev/null | head -1 || true)
  [ -n "$ENVOY" ] || ENVOY=$(command -v envoy || true)
  [ -n "$ENVOY" ] || { echo "no Envoy: run go tool task setup" >&2; exit 1; }
fi

# The Qwen3 tokenizer, decompressed, for the Python clients (never the hub).
TOK=$OUT/qwen3-tokenizer
mkdir -p "$TOK"
gunzip -c tokenize/testdata/models/qwen3/tokenizer.json.gz > "$TOK/tokenizer.json"
cp tokenize/testdata/models/qwen3/tokenizer_config.json "$TOK/"
# transformers' AutoTokenizer wants a config.json naming the model type.
printf '{"model_type":"qwen3","architectures":["Qwen3ForCausalLM"]}\n' > "$TOK/config.json"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1

PIDS=()
stop_stack() {
  for p in "${PIDS[@]}"; do kill -INT "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  PIDS=()
}
trap stop_stack EXIT

# wait_line FILE PATTERN: waits up to 60 s for a line matching PATTERN.
wait_line() {
  for _ in $(seq 600); do
    if grep -q "$2" "$1" 2>/dev/null; then grep -m1 "$2" "$1"; return 0; fi
    sleep 0.1
  done
  echo "timed out waiting for '$2' in $1:" >&2; tail -20 "$1" >&2; return 1
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# start_stack NAME: 3 simulators, warmpath, Envoy; sets URL.
start_stack() {
  local name=$1 dir=$OUT/logs/$1 workers=""
  SIMS=()
  rm -rf "$dir"; mkdir -p "$dir"
  for i in 0 1 2; do
    "$BIN/vllm-sim" --port 0 --profile l40s-27b-fp8 --time-scale "$TIME_SCALE" --seed "$i" \
      --served-model-name qwen3 --tokenizer tokenize/testdata/models/qwen3 \
      --kv-events-config '{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:0","replay_endpoint":"tcp://*:0","topic":"kv-events"}' \
      > "$dir/sim$i.out" 2> "$dir/sim$i.log" &
    PIDS+=($!)
  done
  for i in 0 1 2; do
    local ready http kv rp
    ready=$(wait_line "$dir/sim$i.out" 'vllm-sim ready')
    read -r http kv rp < <(python3 -c 'import json,sys; r=json.loads(sys.argv[1]); print(r["http"], r["kv_events"][0], r["kv_replay"][0])' "$ready")
    SIMS+=("$http")
    workers+="  - {name: w$i, address: \"$http\", models: [qwen3], kv_events: \"$kv\", kv_replay: \"$rp\"}"$'\n'
  done
  cat > "$dir/warmpath.yaml" <<EOF
policy: warmpath
models:
  - name: qwen3
    tokenizer: $ROOT/tokenize/testdata/models/qwen3
    block_size: 16
workers:
$workers
extproc:
  debug_headers: true
log:
  level: info
EOF
  "$BIN/warmpath" serve --config "$dir/warmpath.yaml" --extproc-addr 127.0.0.1:0 --admin-addr 127.0.0.1:0 \
    > "$dir/warmpath.out" 2> "$dir/warmpath.log" &
  PIDS+=($!)
  local line extproc
  line=$(wait_line "$dir/warmpath.out" '^warmpath ready ')
  extproc=$(tr ' ' '\n' <<<"$line" | sed -n 's/^extproc=//p')
  ADMIN=$(tr ' ' '\n' <<<"$line" | sed -n 's/^admin=//p')
  local listen admin
  listen=$(free_port); admin=$(free_port)
  sed -e "s/port_value: 8080/port_value: $listen/" -e "s/port_value: 9901/port_value: $admin/" \
      -e "s/port_value: 9002/port_value: ${extproc##*:}/" envoy/envoy.yaml > "$dir/envoy.yaml"
  "$ENVOY" -c "$dir/envoy.yaml" --disable-hot-restart --concurrency 2 -l warn > "$dir/envoy.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 300); do
    curl -sf "http://127.0.0.1:$admin/ready" >/dev/null 2>&1 && break
    sleep 0.1
  done
  URL=http://127.0.0.1:$listen
  # One tiny request proves the path end to end before the measured run.
  curl -sf "$URL/v1/chat/completions" -H 'content-type: application/json' \
    -d '{"model":"qwen3","messages":[{"role":"user","content":"warm up"}],"max_tokens":1}' > "$dir/warmup.json"
  for i in "${!SIMS[@]}"; do curl -sf "http://${SIMS[$i]}/metrics" > "$dir/sim$i-before.txt"; done
  echo "$name: stack up at $URL (warmpath admin $ADMIN)" >&2
}

# scrape_metrics DIR: warmpath's and the engines' view of the run. The
# engines' TTFT histogram is in simulated seconds.
scrape_metrics() {
  curl -sf "http://$ADMIN/metrics" > "$1/warmpath-metrics.txt" || true
  for i in "${!SIMS[@]}"; do curl -sf "http://${SIMS[$i]}/metrics" > "$1/sim$i-metrics.txt" || true; done
}

run_replay() {
  local dir=$OUT/replay
  rm -rf "$dir"; mkdir -p "$dir"
  cat > "$dir/config.yaml" <<EOF
seed: 42
workload:
  kind: synthetic
  api: chat
  model: qwen3
  ignore_eos: true
  synthetic:
    requests: $REQUESTS
    prompt_tokens: {mean: 512}
    output_tokens: {mean: 256}
    prefix_tokens: $PREFIX_TOKENS
    prefix_count: $PREFIX_COUNT
load:
  kind: constant
  rate: $RATE
clients:
  mode: per-request
EOF
  "$BIN/replay" run --config "$dir/config.yaml" --url "$URL" --label warmpath --out "$dir" --quiet > "$dir/stdout.txt"
}

run_guidellm() {
  local dir=$OUT/guidellm
  rm -rf "$dir"; mkdir -p "$dir"
  # GuideLLM 0.8 takes its options as kind=... objects; a scenario file
  # holds them all. The synthetic prefixes go out as the system message.
  cat > "$dir/scenario.json" <<EOF
{"spec": {
  "backend": {"kind": "openai_http", "target": "$URL", "model": "qwen3",
              "request_format": "/v1/chat/completions", "extras": {"body": {"ignore_eos": true}}},
  "profile": {"kind": "constant", "rate": [$RATE]},
  "constraints": [{"kind": "max_requests", "count": $REQUESTS}],
  "tokenizer": {"kind": "huggingface_auto", "model": "$TOK"},
  "data": [{"kind": "synthetic_text", "prompt_tokens": 512, "output_tokens": 256,
            "prefix_tokens": $PREFIX_TOKENS, "prefix_count": $PREFIX_COUNT}],
  "seed": {"kind": "static", "value": 42},
  "outputs": [{"kind": "json", "path": "$dir/benchmarks.json"}]
}}
EOF
  (cd "$dir" && "$VENV/bin/guidellm" run --scenario "$dir/scenario.json" --disable-console-interactive \
    > "$dir/stdout.txt" 2> "$dir/stderr.txt")
}

run_inference_perf() {
  local dir=$OUT/inference-perf
  rm -rf "$dir"; mkdir -p "$dir"
  local dur
  dur=$(python3 -c "import math; print(math.ceil($REQUESTS / $RATE))")
  cat > "$dir/config.yml" <<EOF
load:
  type: constant
  stages:
  - rate: $RATE
    duration: $dur
api:
  type: chat
  streaming: true
server:
  type: vllm
  model_name: qwen3
  base_url: $URL
  ignore_eos: true
tokenizer:
  pretrained_model_name_or_path: $TOK
data:
  type: shared_prefix
  shared_prefix:
    num_groups: $PREFIX_COUNT
    num_prompts_per_group: $(( (REQUESTS + PREFIX_COUNT - 1) / PREFIX_COUNT ))
    system_prompt_len: $PREFIX_TOKENS
    question_len: 512
    output_len: 256
report:
  request_lifecycle:
    summary: true
    per_stage: true
    per_request: true
storage:
  local_storage:
    path: $dir/reports
EOF
  (cd "$dir" && "$VENV/bin/inference-perf" --config_file "$dir/config.yml" > "$dir/stdout.txt" 2> "$dir/stderr.txt")
}

FAILED=()
for tool in "${TOOLS[@]}"; do
  start_stack "$tool"
  rc=0
  case $tool in
    replay) run_replay || rc=$? ;;
    guidellm) run_guidellm || rc=$? ;;
    inference-perf) run_inference_perf || rc=$? ;;
    *) echo "unknown tool $tool" >&2; rc=2 ;;
  esac
  mkdir -p "$OUT/$tool"
  scrape_metrics "$OUT/$tool"
  cp "$OUT/logs/$tool"/sim*-before.txt "$OUT/$tool/"
  stop_stack
  [ "$rc" = 0 ] || FAILED+=("$tool")
  echo "$tool: exit $rc (output in $OUT/$tool, process logs in $OUT/logs/$tool)" >&2
done

rc=0
python3 "$ROOT/e2e/clients/summarize.py" --out "$OUT" --time-scale "$TIME_SCALE" "${TOOLS[@]}" > "$OUT/summary.md" || rc=$?
cat "$OUT/summary.md"
if [ ${#FAILED[@]} -gt 0 ]; then echo "failed: ${FAILED[*]}" >&2; exit 1; fi
exit "$rc"
