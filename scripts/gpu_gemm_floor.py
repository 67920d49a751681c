"""cuBLAS (through PyTorch) time of one Llama-3.1-8B decode step's GEMMs at a batch
of 8 rows: the floor our GEMM calls can reach without changing the library.
Run on the GPU machine: python3 scripts/gpu_gemm_floor.py"""
import torch

d, q, kv, ff, v, layers = 4096, 4096, 1024, 14336, 128256, 32
shapes = [("qkv", q + 2 * kv, d), ("o", d, q), ("gate_up", 2 * ff, d), ("down", d, ff)]
torch.manual_seed(0)
for n in (1, 8, 64, 256):
    total = 0.0
    parts = []
    for name, out, inp in shapes + [("lm_head", v, d)]:
        # Several weight copies so repeated runs do not measure the L2 cache.
        ws = [torch.randn(out, inp, device="cuda", dtype=torch.bfloat16) * 0.02 for _ in range(3)]
        x = torch.randn(n, inp, device="cuda", dtype=torch.bfloat16)
        for w in ws:
            torch.nn.functional.linear(x, w)
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        reps = 30
        s.record()
        for i in range(reps):
            torch.nn.functional.linear(x, ws[i % 3])
        e.record()
        torch.cuda.synchronize()
        ms = s.elapsed_time(e) / reps
        gbs = out * inp * 2 / ms / 1e6
        mult = 1 if name == "lm_head" else layers
        total += ms * mult
        parts.append(f"{name} {ms*1e3:.0f}us ({gbs:.0f} GB/s)")
        del ws
    print(f"n={n}: step GEMMs {total:.2f} ms  | " + ", ".join(parts), flush=True)
