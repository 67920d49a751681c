#!/usr/bin/env bash
# Fuzzes the GGUF reader (and the config, tokenizer and chat template built from a
# file) with cargo-fuzz / libFuzzer. Usage: scripts/fuzz.sh [seconds=600]
# Stable Rust with RUSTC_BOOTSTRAP=1 stands in for nightly (sanitizer flags).
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz
mkdir -p corpus/gguf
RUSTC_BOOTSTRAP=1 cargo fuzz run -O gguf corpus/gguf seeds -- \
  -max_total_time="${1:-600}" -max_len=8192 -rss_limit_mb=4096
