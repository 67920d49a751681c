#!/usr/bin/env python3
"""Writes the fuzzer's seed corpus: small GGUF files (named .seed so no one takes
them for models) with every metadata type, a tokenizer and tensors of several
formats. Requires the `gguf` and `numpy` packages."""
import pathlib
import numpy as np
import gguf

out = pathlib.Path(__file__).parent / "seeds"
out.mkdir(exist_ok=True)

def write(name, fill):
    path = out / name
    w = gguf.GGUFWriter(str(path), "llama")
    fill(w)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

def llama(w):
    w.add_block_count(1)
    w.add_embedding_length(32)
    w.add_feed_forward_length(64)
    w.add_head_count(2)
    w.add_head_count_kv(1)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    toks = ["<|endoftext|>", "a", "b", "ab", "Ġ", "Ġa"]
    w.add_token_list(toks)
    w.add_token_types([3, 1, 1, 1, 1, 1])
    w.add_token_merges(["a b", "Ġ a"])
    w.add_bos_token_id(0)
    w.add_eos_token_id(0)
    w.add_chat_template("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    w.add_uint8("t.u8", 1); w.add_int8("t.i8", -1); w.add_uint16("t.u16", 2); w.add_int16("t.i16", -2)
    w.add_int64("t.i64", -3); w.add_uint64("t.u64", 3); w.add_float64("t.f64", 0.5); w.add_bool("t.b", True)
    w.add_array("t.arr", [1, 2, 3])
    rng = np.random.default_rng(0)
    w.add_tensor("token_embd.weight", rng.standard_normal((6, 32), dtype=np.float32))
    w.add_tensor("blk.0.attn_norm.weight", np.ones(32, dtype=np.float32))
    q = gguf.quants.quantize(rng.standard_normal((4, 64), dtype=np.float32), gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("blk.0.attn_q.weight", q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    h = rng.standard_normal((2, 32)).astype(np.float16)
    w.add_tensor("blk.0.attn_k.weight", h)

def spm(w):
    w.add_tokenizer_model("llama")
    toks = ["<unk>", "<s>", "</s>", "<0x41>", "▁", "▁a", "a"]
    w.add_token_list(toks)
    w.add_token_scores([0.0, 0.0, 0.0, 0.0, -1.0, -2.0, -3.0])
    w.add_token_types([2, 3, 3, 6, 1, 1, 1])
    w.add_add_space_prefix(True)

write("llama_gpt2.seed", llama)
write("spm.seed", spm)
print(sorted(p.name for p in out.iterdir()))
