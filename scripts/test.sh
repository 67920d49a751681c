#!/usr/bin/env bash
# Runs every test: formatting, lints, reference fixtures, the Rust test suite.
# This is what CI runs (.ci/run) and what the README's test command runs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# The independent reference (DESIGN.md §6): transformers on CPU torch, from PyPI.
python3 -m pip install -q --disable-pip-version-check \
  torch "transformers==5.23.*" accelerate gguf sentencepiece protobuf numpy safetensors tokenizers

echo "== reference fixtures (transformers, CPU)"
stamp=models/reference/.stamp
want=$(cat scripts/reference*.py | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  python3 scripts/reference.py --out models/reference
  echo "$want" > "$stamp"
fi

# NVRTC from PyPI, so the CUDA kernels' sources are compiled to PTX on this
# GPU-less machine too (the GPU checks themselves skip without a driver).
if [ ! -e target/nvrtc/nvidia/cu13/lib/libnvrtc.so.13 ]; then
  python3 -m pip install -q --disable-pip-version-check --no-deps --target target/nvrtc "nvidia-cuda-nvrtc==13.0.*"
fi
export LD_LIBRARY_PATH="$PWD/target/nvrtc/nvidia/cu13/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

echo "== cargo fmt / clippy (without and with the CUDA backend)"
cargo fmt --all --check
cargo clippy --workspace --all-targets --release -- -D warnings
cargo clippy --workspace --all-targets --release --all-features -- -D warnings

echo "== cargo test (CUDA backend built in: GPU tests skip here, NVRTC compiles the kernels)"
cargo test --workspace --release --all-features 2>&1 | tee target/test.log
# Every test binary printed its own result line; fail loudly if none ran.
grep -q "^test result: ok" target/test.log

echo "== HTTP clients and the chat page against peregrine serve"
scripts/test_http.sh
