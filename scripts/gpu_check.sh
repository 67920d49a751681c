#!/usr/bin/env bash
# One run on a GPU machine: kernel checks against the CPU backend, GPU-vs-CPU
# forward passes, then the Llama-3.1-8B (dummy bf16) benchmarks. Binaries are built
# on the CPU machine by scripts/gpu_bundle.sh into .gpu/ (the GPU machine has no
# Rust); results go to $OUT (or target/gpu-out).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-target/gpu-out}
mkdir -p "$OUT"
B=.gpu/bin
log() { echo "=== $*" | tee -a "$OUT/summary.txt"; }

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
# libcuda from the driver; libnvrtc / libcublas from the CUDA toolkit or the pip wheels.
for d in /usr/local/nvidia/lib64 /usr/lib/x86_64-linux-gnu /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
    $(python3 -c 'import nvidia, os; p = nvidia.__path__[0]; print(" ".join(os.path.join(p, d, "lib") for d in os.listdir(p)))' 2>/dev/null) \
    $(find / -maxdepth 6 -name 'libcublas.so.13' -printf '%h\n' 2>/dev/null | head -3) \
    $(find / -maxdepth 6 -name 'libnvrtc.so.13' -printf '%h\n' 2>/dev/null | head -3); do
  [ -d "$d" ] && LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:$d"
done
export LD_LIBRARY_PATH PEREGRINE_MODELS_DIR=$PWD/.gpu/models PEREGRINE_KERNEL_CACHE=/tmp/peregrine-kernels
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH" >> "$OUT/gpu.txt"

log "kernels vs CPU"
$B/cuda_kernels --nocapture --test-threads=1 2>&1 | tee "$OUT/kernels.txt" | grep -E 'test |SKIPPED|panicked|result'
log "forward passes: GPU greedy vs CPU teacher-forced"
$B/cuda_forward --nocapture --test-threads=1 2>&1 | tee "$OUT/forward.txt" | grep -E 'test |SKIPPED|panicked|result|greedy'

M=crates/model/configs/llama-3.1-8b/config.json
if [ -x $B/peregrine ] && [ "${SKIP_BENCH:-0}" != 1 ]; then
  log "generate on tiny-llama, cuda"
  $B/peregrine generate --device cuda -m .gpu/models/reference/tiny-llama --prompt "Hello" --max-tokens 8 2>&1 | tail -3
  log "cuBLAS floor of one decode step's GEMMs (PyTorch)"
  python3 scripts/gpu_gemm_floor.py 2>&1 | tee "$OUT/gemm_floor.txt"
  log "bench latency: Llama-3.1-8B dummy bf16, batch 8, in 32, out 128"
  PEREGRINE_CUDA_PROFILE=1 $B/peregrine bench latency --device cuda -m $M --load-format dummy --batch-size 8 --input-len 32 --output-len 128 \
    --num-iters-warmup 3 --num-iters 10 --output-json "$OUT/latency.json" 2>&1 | tee "$OUT/latency.txt" | grep -vE '^\s*$' | tail -12
  log "bench throughput: 200 prompts, in 256, out 128 (random)"
  $B/peregrine bench throughput --device cuda -m $M --load-format dummy --num-prompts 200 --input-len 256 --output-len 128 \
    --max-num-batched-tokens 8192 --output-json "$OUT/throughput.json" 2>&1 | tee "$OUT/throughput.txt" | grep -vE '^\s*$' | tail -6
fi
log "done"
