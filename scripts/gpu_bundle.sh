#!/usr/bin/env bash
# Builds what scripts/gpu_check.sh runs into .gpu/ (ignored; carried to the GPU
# machine, 64 MiB at most): the release binary with CUDA support, the two CUDA
# test binaries, and the small reference models. Stripped to fit.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .gpu && mkdir -p .gpu/bin .gpu/models/reference
cargo build --release --features cuda -p peregrine-cli
cp target/release/peregrine .gpu/bin/
for t in "peregrine-compute cuda_kernels" "peregrine-model cuda_forward"; do
  set -- $t
  exe=$(cargo test --release --features cuda -p "$1" --test "$2" --no-run --message-format=json 2>/dev/null \
    | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == sys.argv[1]: print(m["executable"])' "$2" | tail -1)
  cp "$exe" ".gpu/bin/$2"
done
strip .gpu/bin/*
for m in tiny-llama tiny-qwen2; do
  mkdir -p .gpu/models/reference/$m
  (cd models/reference/$m && cp config.json *.safetensors $( [ $m = tiny-llama ] && echo tokenizer.json tokenizer_config.json generation_config.json) $(ls model.safetensors.index.json 2>/dev/null) ../../../.gpu/models/reference/$m/ 2>/dev/null || true)
done
du -sh .gpu .gpu/bin/* .gpu/models/reference/*
