#!/usr/bin/env bash
# Real clients against a real `peregrine serve` on the default model:
#   - the official openai Python SDK and huggingface_hub's InferenceClient
#     (scripts/test_clients.py), /metrics through prometheus_client's parser;
#   - the chat page at / in headless Chromium (scripts/chat_page_check.mjs),
#     with a screenshot in target/artifacts/chat_page.png.
# Installs what it needs (pip; apt chromium; npm playwright-core). Part of scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
artifacts=target/artifacts
mkdir -p "$artifacts"

python3 -m pip install -q --disable-pip-version-check \
  openai huggingface_hub prometheus_client requests pytest

if ! command -v chromium >/dev/null; then
  sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
node_dir=target/node
if [ ! -d "$node_dir/node_modules/playwright-core" ]; then
  mkdir -p "$node_dir"
  (cd "$node_dir" && npm install --silent --no-save --no-audit --no-fund playwright-core >/dev/null)
fi

key=test-key
log="$artifacts/serve.log"
target/release/peregrine serve --port 0 --api-key "$key" --kv-cache-memory 512MiB >"$log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
port=""
for _ in $(seq 1 300); do
  port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log" | head -1)
  if [ -n "$port" ] && curl -sf "http://127.0.0.1:$port/health" >/dev/null; then break; fi
  kill -0 $server 2>/dev/null || { cat "$log"; echo "the server exited" >&2; exit 1; }
  sleep 0.2
done
url="http://127.0.0.1:$port"
echo "server ready at $url"

echo "== openai SDK, huggingface_hub, prometheus parser"
PEREGRINE_URL=$url PEREGRINE_API_KEY=$key python3 -m pytest -q scripts/test_clients.py

echo "== chat page in headless Chromium"
PEREGRINE_API_KEY=$key NODE_PATH="$PWD/$node_dir/node_modules" \
  node scripts/chat_page_check.mjs "$url" "$artifacts"

# SIGTERM: a clean, prompt exit.
kill -TERM $server
wait $server
trap - EXIT
echo "server stopped cleanly"
