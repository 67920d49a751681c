#!/usr/bin/env bash
# Prompt and generation speed of `peregrine generate` on the default model beside
# llama.cpp's llama-bench (pp512 / tg128) in the same run, same threads.
# Usage: scripts/bench_cpu.sh [threads=2] [repeats=3]
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${1:-2}
REPEATS=${2:-3}
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
scripts/fetch_default_model.sh >/dev/null
cargo build --release -q -p peregrine-cli
BIN=$(scripts/build_llamacpp.sh)
echo "# $(date -u +%F) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, threads=$THREADS"
echo "## llama.cpp (llama-bench, pp512 + tg128, $REPEATS repetitions)"
LD_LIBRARY_PATH="$BIN" "$BIN/llama-bench" -m "$MODEL" -t "$THREADS" -p 512 -n 128 -r "$REPEATS" -o md 2>/dev/null
# Same tests as llama-bench: pp512 = a 512-token prompt in one batch; tg128 = 128
# decode steps from an (almost) empty context. --prompt-tokens repeats the text's ids.
echo "## peregrine generate (pp512: 512-token prompt; tg128: 1-token prompt, 128 decode steps)"
TEXT="The quick brown fox jumps over the lazy dog. "
for i in $(seq "$REPEATS"); do
  ./target/release/peregrine generate -m "$MODEL" --threads "$THREADS" -p "$TEXT" \
    --prompt-tokens 512 --max-tokens 1 --ignore-eos 2>&1 >/dev/null | grep '^prompt:' | sed 's/^/pp512 /'
  ./target/release/peregrine generate -m "$MODEL" --threads "$THREADS" -p "$TEXT" \
    --prompt-tokens 1 --max-tokens 129 --ignore-eos 2>&1 >/dev/null | grep '^prompt:' | sed 's/^/tg128 /'
done
