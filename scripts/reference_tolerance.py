#!/usr/bin/env python3
# requires: same as scripts/reference.py
"""How far do plausible implementation choices move the logits? (the basis of docs/reference.md's tolerances)

Not part of CI. Reloads a model the reference covers, perturbs the arithmetic the way an inference engine
might, and compares teacher-forced logits with the stored reference:

  f16-kv      K and V rounded to f16 (a half-precision KV cache)
  q8-act      every matmul input quantized to Q8_0 blocks of 32 (llama.cpp's CPU path for quantized weights)
  q8-act+f16-kv
  bf16        weights and activations in bf16 (GPU-style)

    python3.11 scripts/reference_tolerance.py [--ref models/reference] [--name smollm2-q4_1]
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import reference as R  # noqa: E402  (sets the offline environment on import)
import reference_common as RC  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402


def q8_0(x):
    shape = x.shape
    xb = x.reshape(*shape[:-1], shape[-1] // 32, 32)
    scale = xb.abs().amax(-1, keepdim=True) / 127
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.where(scale > 0, torch.round(xb / safe), torch.zeros_like(xb))
    return (q * scale.half().float()).reshape(shape)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ref", default="models/reference")
    ap.add_argument("--name", default="smollm2-q4_1")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    d = Path(args.ref) / args.name
    ref = json.load(open(d / "reference.json", encoding="utf-8"))
    if ref["format"] == "gguf":
        p = Path(ref["model_path"])
        model = RC.gguf_model(p if p.is_absolute() else (d / p).resolve())
    else:
        model = AutoModelForCausalLM.from_pretrained(str(d), dtype=torch.float32, attn_implementation="sdpa").eval()
    vocab, eos = ref["vocab_size"], ref["eos_token_ids"]

    def measure(label):
        rows, flips = [], []
        for c in ref["cases"]:
            full = torch.tensor([c["prompt_ids"] + c["greedy_ids"][:-1]])
            with torch.no_grad():
                got = model(full).logits[0, len(c["prompt_ids"]) - 1:].float().numpy()
            want = np.fromfile(d / c["logits_file"], dtype="<f4").reshape(c["logits_rows"], vocab)
            diff = np.abs(got - want).max(1)
            rows.extend(diff.tolist())
            masked = got.copy()
            masked[:, eos] = -np.inf
            for i, tok in enumerate(masked.argmax(1)):
                if tok != c["greedy_ids"][i]:
                    flips.append(f"{c['name']}[{i}] margin {c['top2_margin'][i]:.4f}")
        rows = np.array(rows)
        print(f"{label:16s} max|d| {rows.max():.4g}  p50 {np.median(rows):.4g}  p99 {np.percentile(rows, 99):.4g}  "
              f"top-1 flips (EOS excluded): {flips or 'none'}", flush=True)

    measure("as reference")
    hooks = []

    def add_f16_kv():
        for name, mod in model.named_modules():
            if name.endswith(("k_proj", "v_proj")):
                hooks.append(mod.register_forward_hook(lambda m, a, out: out.half().float()))

    def add_q8():
        for _, mod in model.named_modules():
            if isinstance(mod, torch.nn.Linear):
                hooks.append(mod.register_forward_pre_hook(lambda m, a: (q8_0(a[0]),)))

    def clear():
        while hooks:
            hooks.pop().remove()

    add_f16_kv(); measure("f16-kv"); clear()
    add_q8(); measure("q8-act"); add_f16_kv(); measure("q8-act+f16-kv"); clear()
    model.to(torch.bfloat16); measure("bf16")


if __name__ == "__main__":
    main()
