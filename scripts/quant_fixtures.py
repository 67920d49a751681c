#!/usr/bin/env python3
"""Generate the reference fixtures for peregrine-compute's quant tests.

Writes crates/compute/tests/fixtures/quant/cases.json: a list of rows, each with
the stored bytes (hex) and the f32 values ggml's dequantize_row_* gives for
them (hex of little-endian f32 bits, so the comparison can be bitwise).

The reference is the `gguf` Python package (gguf-py, maintained alongside
ggml), whose numpy dequantizers compute the same float operations in the same
order as ggml-quants.c (one rounding per multiply and per add).

Rows per format:
  * "quantized": random normal data run through gguf.quants.quantize, where
    gguf can quantize that type (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0);
  * "random": random bytes with the scale fields (f16 d / dmin, or f32 d)
    overwritten with sane finite values, so every bit pattern of the quants
    is exercised; plus one block with d = 0 / a subnormal d where the format
    has f16 scales;
  * "specials" (F32/F16/BF16 only): raw bit patterns including inf, NaN, -0
    and subnormals (marked finite=false; the dot test skips them);
  * "real/...": rows of the real SmolLM2 model file (Q4_1, Q8_0, F32).

gguf has no Q8_1 or Q8_K codec; for those two the expected values come from a
direct numpy transcription of ggml's `y = d * qs[j]` (f32 * f32).

Usage: python3 scripts/quant_fixtures.py [--model PATH] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import GGUFReader
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize, quantize

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(ROOT, "crates/compute/tests/fixtures/quant/cases.json")
DEFAULT_MODEL = os.path.join(ROOT, "models/SmolLM2-135M-Instruct.Q4_1.gguf")

QK_K = 256

# ggml name -> gguf type; names as WeightFormat::name() spells them.
FORMATS = {
    "F32": T.F32, "F16": T.F16, "BF16": T.BF16,
    "Q4_0": T.Q4_0, "Q4_1": T.Q4_1, "Q5_0": T.Q5_0, "Q5_1": T.Q5_1,
    "Q8_0": T.Q8_0, "Q8_1": T.Q8_1,
    "Q2_K": T.Q2_K, "Q3_K": T.Q3_K, "Q4_K": T.Q4_K, "Q5_K": T.Q5_K,
    "Q6_K": T.Q6_K, "Q8_K": T.Q8_K,
}
QUANTIZABLE = {"F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"}

# Byte offsets of the scale fields inside one block: (offset, kind) where kind
# is "f16" or "f32". Layouts from ggml-common.h.
SCALE_FIELDS = {
    "Q4_0": [(0, "f16")],                  # d, qs[16]
    "Q4_1": [(0, "f16"), (2, "f16")],      # d, m, qs[16]
    "Q5_0": [(0, "f16")],                  # d, qh[4], qs[16]
    "Q5_1": [(0, "f16"), (2, "f16")],      # d, m, qh[4], qs[16]
    "Q8_0": [(0, "f16")],                  # d, qs[32]
    "Q8_1": [(0, "f32"), (4, "f32")],      # d, s, qs[32] (40-byte layout, see below)
    "Q2_K": [(80, "f16"), (82, "f16")],    # scales[16], qs[64], d, dmin
    "Q3_K": [(108, "f16")],                # hmask[32], qs[64], scales[12], d
    "Q4_K": [(0, "f16"), (2, "f16")],      # d, dmin, scales[12], qs[128]
    "Q5_K": [(0, "f16"), (2, "f16")],      # d, dmin, scales[12], qh[32], qs[128]
    "Q6_K": [(208, "f16")],                # ql[128], qh[64], scales[16], d
    "Q8_K": [(0, "f32")],                  # d, qs[256], bsums[16]
}


def hexs(a: np.ndarray) -> str:
    return np.ascontiguousarray(a).view(np.uint8).tobytes().hex()


def case(name: str, fmt: str, src: np.ndarray, expected: np.ndarray, finite: bool = True) -> dict:
    src = np.ascontiguousarray(src).view(np.uint8).reshape(-1)
    expected = np.ascontiguousarray(expected, dtype=np.float32).reshape(-1)
    block, type_size = GGML_QUANT_SIZES[FORMATS[fmt]]
    n = expected.size
    assert n % block == 0 and src.size == n // block * type_size, (name, n, src.size)
    if finite:
        assert np.all(np.isfinite(expected)), name
    return {
        "name": name,
        "format": fmt,
        "ggml_id": int(FORMATS[fmt]),
        "n": int(n),
        "finite": bool(finite),
        "src": src.tobytes().hex(),
        "expected": expected.astype("<f4").tobytes().hex(),
    }


def reference(fmt: str, src: np.ndarray) -> np.ndarray:
    """ggml's dequantize_row_* of one row of bytes."""
    src = np.ascontiguousarray(src).view(np.uint8).reshape(-1)
    if fmt == "Q8_1":
        # block_q8_1 as format.rs / gguf-py size it: { f32 d; f32 s; int8 qs[32] }.
        b = src.reshape(-1, 40)
        d = b[:, 0:4].copy().view("<f4")
        return (b[:, 8:].copy().view(np.int8).astype(np.float32) * d).reshape(-1)
    if fmt == "Q8_K":
        # block_q8_K: { f32 d; int8 qs[256]; int16 bsums[16] }.
        b = src.reshape(-1, 292)
        d = b[:, 0:4].copy().view("<f4")
        return (b[:, 4:260].copy().view(np.int8).astype(np.float32) * d).reshape(-1)
    if fmt == "BF16":
        # gguf's BF16 dequantizer wants a block-shaped array; same bits either way.
        return (src.view("<u2").astype(np.uint32) << 16).view(np.float32)
    return np.asarray(dequantize(src, FORMATS[fmt]), dtype=np.float32).reshape(-1)


def random_blocks(rng: np.random.Generator, fmt: str, n_blocks: int, edge: bool) -> np.ndarray:
    _, type_size = GGML_QUANT_SIZES[FORMATS[fmt]]
    blocks = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
    for i in range(n_blocks):
        for (off, kind) in SCALE_FIELDS[fmt]:
            if kind == "f16":
                v = np.float16(rng.standard_normal() * 0.02)
                if edge and i == 0:
                    v = np.float16(0.0)
                if edge and i == 1:
                    v = np.uint16(0x0001).view(np.float16)  # smallest subnormal
                blocks[i, off:off + 2] = np.array([v], dtype="<f2").view(np.uint8)
            else:
                v = np.float32(rng.standard_normal() * 0.01)
                if edge and i == 0:
                    v = np.float32(0.0)
                blocks[i, off:off + 4] = np.array([v], dtype="<f4").view(np.uint8)
        if fmt == "Q8_K":
            # bsums[j] = sum of qs[16j..16j+16] (unused by dequantization, kept honest).
            qs = blocks[i, 4:260].view(np.int8).astype(np.int16)
            blocks[i, 260:292] = qs.reshape(16, 16).sum(axis=1).astype("<i2").view(np.uint8)
        if fmt == "Q8_1":
            d = blocks[i, 0:4].copy().view("<f4")[0]
            s = np.float32(d * np.float32(blocks[i, 8:].view(np.int8).astype(np.int32).sum()))
            blocks[i, 4:8] = np.array([s], dtype="<f4").view(np.uint8)
    return blocks.reshape(-1)


def synthetic_cases(rng: np.random.Generator) -> list[dict]:
    out = []
    for fmt in FORMATS:
        block, _ = GGML_QUANT_SIZES[FORMATS[fmt]]
        if fmt in QUANTIZABLE:
            n = 256 if block == 1 else 8 * block
            data = (rng.standard_normal(n) * rng.uniform(0.01, 2.0)).astype(np.float32)
            q = np.asarray(quantize(data, FORMATS[fmt])).view(np.uint8).reshape(-1)
            out.append(case(f"{fmt}/quantized", fmt, q, reference(fmt, q)))
        if block > 1:
            n_blocks = 8 if block == 32 else 4
            src = random_blocks(rng, fmt, n_blocks, edge=False)
            out.append(case(f"{fmt}/random", fmt, src, reference(fmt, src)))
            src = random_blocks(rng, fmt, 2, edge=True)
            out.append(case(f"{fmt}/edge-scales", fmt, src, reference(fmt, src)))
    # Raw bit patterns for the float formats, specials included.
    f16_special = [0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x3C00, 0x7BFF, 0xFBFF,
                   0x7C00, 0xFC00, 0x7E00, 0x7C01, 0xFE00, 0x3555, 0xC000]
    bits = np.concatenate([np.array(f16_special, dtype=np.uint16),
                           rng.integers(0, 1 << 16, 48, dtype=np.uint16)]).astype("<u2")
    out.append(case("F16/specials", "F16", bits, reference("F16", bits), finite=False))
    bf16_special = [0x0000, 0x8000, 0x0001, 0x8001, 0x007F, 0x0080, 0x3F80, 0x7F7F, 0xFF7F,
                    0x7F80, 0xFF80, 0x7FC0, 0x7F81, 0xFFC0, 0x3EAB, 0xC000]
    bits = np.concatenate([np.array(bf16_special, dtype=np.uint16),
                           rng.integers(0, 1 << 16, 48, dtype=np.uint16)]).astype("<u2")
    out.append(case("BF16/specials", "BF16", bits, reference("BF16", bits), finite=False))
    bits = rng.integers(0, 1 << 32, 64, dtype=np.uint32).astype("<u4")
    bits[:6] = [0x00000000, 0x80000000, 0x00000001, 0x7F800000, 0xFF800000, 0x7FC00000]
    out.append(case("F32/specials", "F32", bits, reference("F32", bits), finite=False))
    return out


def model_cases(path: str) -> list[dict]:
    reader = GGUFReader(path)
    tensors = {t.name: t for t in reader.tensors}
    picks = [
        ("blk.0.attn_q.weight", [0, 1]),
        ("blk.0.ffn_down.weight", [0]),
        ("token_embd.weight", [0, 1, 1000]),
        ("blk.0.attn_norm.weight", None),
    ]
    out = []
    for name, rows in picks:
        t = tensors[name]
        fmt = t.tensor_type.name
        data = np.asarray(t.data)
        if rows is None:
            src = data.reshape(-1).view(np.uint8)
            out.append(case(f"real/{name}", fmt, src, reference(fmt, src)))
            continue
        for r in rows:
            src = data[r].view(np.uint8)
            out.append(case(f"real/{name}[{r}]", fmt, src, reference(fmt, src)))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--seed", type=int, default=20240601)
    args = ap.parse_args()

    rng = np.random.default_rng(args.seed)
    cases = synthetic_cases(rng)
    if os.path.exists(args.model):
        cases += model_cases(args.model)
    else:
        print(f"warning: {args.model} not found; no real-model rows", file=sys.stderr)

    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"generator": "scripts/quant_fixtures.py", "seed": args.seed, "cases": cases}, f, indent=0)
        f.write("\n")
    size = os.path.getsize(args.out)
    print(f"wrote {len(cases)} rows to {args.out} ({size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
