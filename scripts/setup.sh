#!/usr/bin/env bash
# Sets up a fresh machine for Peregrine: Python packages for the reference
# fixtures and the default model. Idempotent; used by the README and by CI.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo >/dev/null || { echo "cargo not found: install Rust from https://rustup.rs" >&2; exit 1; }
# The reference implementation (DESIGN.md §6). Plain PyPI torch runs on the CPU.
python3 -m pip install -q --disable-pip-version-check \
  torch "transformers==5.23.*" accelerate gguf sentencepiece protobuf numpy safetensors tokenizers
scripts/fetch_default_model.sh >/dev/null
