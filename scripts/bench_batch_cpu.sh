#!/usr/bin/env bash
# Aggregate generation speed with N concurrent sequences on the default model:
# llama.cpp's llama-server (N slots, N requests in flight at once) beside
# `peregrine generate`'s offline batch mode (N prompts, --max-num-seqs N), in the
# same run, same threads, same prompts, every sequence generating exactly max_tokens.
# Usage: scripts/bench_batch_cpu.sh [threads=2] [max_tokens=64] [levels="1 4 16 64"]
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${1:-2}
MAX_TOKENS=${2:-64}
LEVELS=${3:-"1 4 16 64"}
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
CTX_PER_SLOT=512
scripts/fetch_default_model.sh >/dev/null
BIN=$(scripts/build_llamacpp.sh)
# The batch mode is new and the tree is edited concurrently: a failed build or a
# binary without --input gives n/a rows rather than losing the llama.cpp numbers.
PEREGRINE=./target/release/peregrine NA=
if ! cargo build --release -q -p peregrine-cli; then
  NA="n/a (build failed)"
elif ! grep -q -- '--input' <<<"$("$PEREGRINE" generate --help)"; then
  NA="n/a (offline batch mode not built)"
fi

TMP=$(mktemp -d)
SERVER_PID=
stop_server() {
  if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; fi
  SERVER_PID=
}
trap 'stop_server; rm -rf "$TMP"' EXIT
trap 'exit 130' INT TERM
python3 scripts/make_batch_prompts.py 64 >"$TMP/prompts.jsonl"

# Sets L to the gen tok/s of llama-server with N slots and N concurrent requests.
# (Not run in $(...): the EXIT trap must see SERVER_PID to stop the server.)
llama_server() {
  local n=$1 port url
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  url=http://127.0.0.1:$port
  # -c is shared by the slots (KV not unified when -np is given): N x per-slot context.
  # --threads-http N+2 so no request waits for an HTTP thread.
  LD_LIBRARY_PATH="$BIN" "$BIN/llama-server" -m "$MODEL" -t "$THREADS" -np "$n" \
    -c $((n * CTX_PER_SLOT)) -b 512 --port "$port" --threads-http $((n + 2)) --no-webui \
    >"$TMP/server-$n.log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 120); do
    curl -sf -o /dev/null "$url/health" && break
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 1
  done
  if ! curl -sf -o /dev/null "$url/health"; then
    tail -n 20 "$TMP/server-$n.log" >&2; echo "llama-server -np $n did not become healthy" >&2; exit 1
  fi
  # Warm-up: first-request costs (page faults, thread start) stay out of the timing.
  python3 scripts/llama_server_load.py --url "$url" --prompts "$TMP/prompts.jsonl" \
    --concurrency 1 --max-tokens 8 >/dev/null
  python3 scripts/llama_server_load.py --url "$url" --prompts "$TMP/prompts.jsonl" \
    --concurrency "$n" --max-tokens "$MAX_TOKENS" >"$TMP/load-$n.json"
  stop_server # before Peregrine runs, so the two never share the cores
  L=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["gen_tok_per_s"])' "$TMP/load-$n.json")
}

# Sets P to the gen tok/s of Peregrine's offline batch mode over the first N prompts.
peregrine() {
  local n=$1
  if [ -n "$NA" ]; then P=$NA; return; fi
  head -n "$n" "$TMP/prompts.jsonl" >"$TMP/prompts-$n.jsonl"
  if ! "$PEREGRINE" generate --model "$MODEL" --threads "$THREADS" --input "$TMP/prompts-$n.jsonl" \
      --max-tokens "$MAX_TOKENS" --ignore-eos --max-num-seqs "$n" --output /dev/null 2>"$TMP/peregrine-$n.log"; then
    tail -n 20 "$TMP/peregrine-$n.log" >&2; P="error (see stderr)"; return
  fi
  # Last line: "aggregate: G generated tokens, P prompt tokens in Ss (X generated tok/s)"
  P=$(tail -n 1 "$TMP/peregrine-$n.log" | sed -n 's/.*(\([0-9.]*\) generated tok\/s).*/\1/p')
  [ -n "$P" ] || P="unparsed: $(tail -n 1 "$TMP/peregrine-$n.log")"
}

echo "# $(date -u +%F) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, threads=$THREADS, max_tokens=$MAX_TOKENS"
echo "| concurrent | llama-server gen tok/s | peregrine gen tok/s | ratio |"
echo "|---:|---:|---:|---:|"
for n in $LEVELS; do
  llama_server "$n"
  peregrine "$n"
  if [[ $P =~ ^[0-9.]+$ ]]; then ratio=$(awk -v p="$P" -v l="$L" 'BEGIN { printf "%.2f", p / l }'); else ratio=n/a; fi
  echo "| $n | $L | $P | $ratio |"
done
