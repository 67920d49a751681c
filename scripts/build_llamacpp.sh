#!/usr/bin/env bash
# Builds llama.cpp (vendored in the llama-cpp-python source package on PyPI) for
# the peer benchmarks: llama-bench and llama-server. Cached outside the repo;
# not part of CI (about 15 minutes on two cores).
set -euo pipefail
CACHE="${PEREGRINE_LLAMACPP_DIR:-$HOME/.cache/peregrine/llama.cpp}"
VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
if [ -x "$CACHE/build/bin/llama-server" ] && [ -x "$CACHE/build/bin/llama-bench" ]; then
  echo "$CACHE/build/bin"; exit 0
fi
mkdir -p "$CACHE" && cd "$CACHE"
python3 -m pip install -q cmake ninja
python3 -m pip download -q --no-deps --no-binary llama-cpp-python "llama-cpp-python==$VERSION" -d src
tar -xzf src/llama_cpp_python-"$VERSION".tar.gz
SRC="$CACHE/llama_cpp_python-$VERSION/vendor/llama.cpp"
# GGML_NATIVE=OFF + runtime backends: the same portable build a package would ship.
cmake -S "$SRC" -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF \
  -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF >&2
cmake --build build --target llama-bench llama-server -j "$(nproc)" >&2
echo "$CACHE/build/bin"
