"""The tiny-spm-gguf reference model of scripts/reference.py: a SentencePiece tokenizer
trained here and a llama-architecture GGUF with mixed quant types."""

from reference_common import *  # noqa: F401,F403

# --------------------------------------------------------------------------------------------------
# Tiny SentencePiece GGUF
# --------------------------------------------------------------------------------------------------


def spm_corpus():
    base = SPM_CORPUS_BASE.splitlines()
    rng = random.Random(SEED)
    words = " ".join(base).split()
    corpus = list(base) * 3
    for _ in range(4000):
        corpus.append(" ".join(rng.choice(words) for _ in range(rng.randint(3, 14))))
    return corpus


def train_spm(d):
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(spm_corpus()),
        model_writer=buf,
        model_type="bpe",
        vocab_size=1000,
        byte_fallback=True,
        character_coverage=1.0,
        # Llama-2's trainer settings: no normalization, dummy prefix, keep whitespace, split digits.
        normalization_rule_name="identity",
        add_dummy_prefix=True,
        remove_extra_whitespaces=False,
        split_digits=True,
        allow_whitespace_only_pieces=True,
        max_sentencepiece_length=16,
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        num_threads=1,
        shuffle_input_sentence=False,
        input_sentence_size=0,
        minloglevel=2,
    )
    (d / "tokenizer.model").write_bytes(buf.getvalue())
    return spm.SentencePieceProcessor(model_file=str(d / "tokenizer.model"))


def spm_hf_tokenizer(sp, d, chat_template):
    """tokenizer.json in the layout of Llama-2 / Mistral-7B-v0.1 repos (legacy: Prepend+Replace normalizer,
    no pre-tokenizer, BPE with byte fallback, BOS post-processor). It matches sentencepiece exactly."""
    n = sp.get_piece_size()
    vocab = {sp.id_to_piece(i): i for i in range(n)}
    merges = generate_merges(vocab)
    tk = Tokenizer(tk_models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    tk.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tk.pre_tokenizer = None
    tk.decoder = decoders.Sequence(
        [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    tk.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t in ("<unk>", "<s>", "</s>")]
    )
    tk.post_processor = processors.TemplateProcessing(
        single="<s>:0 $A:0", pair="<s>:0 $A:0 <s>:1 $B:1", special_tokens=[("<s>", 1)]
    )
    tk.save(str(d / "tokenizer.json"))
    write_json(
        d / "tokenizer_config.json",
        {
            # Not "LlamaTokenizer": transformers 5 would rebuild the pipeline from its own class defaults
            # (Metaspace pre-tokenizer) instead of reading the normalizer from tokenizer.json.
            "tokenizer_class": "PreTrainedTokenizerFast",
            "legacy": True,
            "add_bos_token": True,
            "add_eos_token": False,
            "add_prefix_space": True,
            "bos_token": "<s>",
            "eos_token": "</s>",
            "unk_token": "<unk>",
            "pad_token": None,
            "clean_up_tokenization_spaces": False,
            "model_max_length": 2048,
            "chat_template": chat_template,
        },
    )
    tok = PreTrainedTokenizerFast.from_pretrained(str(d))
    # transformers must not have rebuilt the pipeline from its own LlamaTokenizer defaults.
    assert "Prepend" in str(tok.backend_tokenizer.normalizer), tok.backend_tokenizer.normalizer
    return tok


def fuzz_texts(n, seed):
    rng = random.Random(seed)
    pool = (
        list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
        + list("éèêñüöäßçåøæœ東京日本北中国语")
        + list("     \n\n\t.,;:!?'\"()[]{}-_=+*/\\#@$%&^~`|")
        + ["😀", "🍕", "👩\u200d👩\u200d👧", "🇫🇷", "\u0301", "ŋ", "ǂ", "Ⅻ", "½", "٣", "\r\n", "→", "€"]
    )
    words = " ".join(SPM_CORPUS_BASE.splitlines()).split()
    out = []
    for _ in range(n):
        if rng.random() < 0.5:
            s = "".join(rng.choice(pool) for _ in range(rng.randint(0, 30)))
        else:
            s = "".join(rng.choice(words) + rng.choice([" ", "  ", "\n", "", "\t", " \n "]) for _ in range(rng.randint(1, 8)))
        out.append(s)
    return out


def compare_tokenizers(a, b, texts, add_special_tokens=True):
    diffs = []
    for t in texts:
        x = a(t, add_special_tokens=add_special_tokens)["input_ids"]
        y = b(t, add_special_tokens=add_special_tokens)["input_ids"]
        if x != y:
            diffs.append({"text": t, "ids": x, "other_ids": y})
    return diffs


def llama_permute(w, n_head, n_head_kv):
    """convert_hf_to_gguf.py LlamaModel.permute: HF rotate-half q/k rows -> GGUF interleaved rows."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama_unpermute(w, n_head, n_head_kv):
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


# Random but well-formed K-quant blocks (gguf-py cannot quantize K types). Each byte of a block is
# uniform random except the f16 super-block scales d (and dmin), set so each block has mean ~0 and the
# tensor has about the std of the f32 weights it replaces.
# The values the model computes with are gguf.dequantize() of these bytes (what transformers loads).
KQUANT_LAYOUT = {
    # type: (block bytes, [(byte offset of f16 d)], [(byte offset of f16 dmin)])
    QT.Q4_K: (144, [0], [2]),
    QT.Q5_K: (176, [0], [2]),
    QT.Q6_K: (210, [208], []),
}


def random_kquant(rows, cols, qtype, std, rng):
    bsize, d_offs, m_offs = KQUANT_LAYOUT[qtype]
    assert cols % 256 == 0
    nb = rows * cols // 256
    blocks = rng.integers(0, 256, size=(nb, bsize), dtype=np.uint8)

    def set_f16(offs, vals):
        v = np.asarray(vals, dtype=np.float16).reshape(nb, 1).view(np.uint8)
        for o in offs:
            blocks[:, o:o + 2] = v

    def deq():
        return gguf.quants.dequantize(blocks.reshape(rows, -1), qtype).reshape(nb, 256).astype(np.float64)

    # Calibrate: with d=1, dmin=0 the block is A (>= 0 for Q4_K/Q5_K); with d=0, dmin=1 it is -B.
    set_f16(d_offs, np.ones(nb))
    set_f16(m_offs, np.zeros(nb))
    a = deq()
    d = (std / a.std()) * np.exp(rng.normal(0.0, 0.1, size=nb))  # mild per-block scale variation
    set_f16(d_offs, d)
    if m_offs:
        set_f16(d_offs, np.zeros(nb))
        set_f16(m_offs, np.ones(nb))
        b = -deq()
        # dmin per block so that every block (hence every row) has mean ~0: no built-in token preference.
        dmin = np.asarray(d, np.float16).astype(np.float64) * a.mean(1) / np.maximum(b.mean(1), 1e-6)
        set_f16(d_offs, d)
        set_f16(m_offs, dmin)
        spread = deq().std()
        set_f16(d_offs, d * std / spread)
        set_f16(m_offs, dmin * std / spread)
    return blocks.reshape(rows, -1)


SPM_TENSOR_TYPES = {
    "token_embd.weight": QT.Q4_K,
    "output.weight": QT.Q6_K,
    "blk.0.attn_q.weight": QT.Q8_0,
    "blk.0.attn_k.weight": QT.Q4_0,
    "blk.0.attn_v.weight": QT.Q4_1,
    "blk.0.attn_output.weight": QT.F16,
    "blk.0.ffn_gate.weight": QT.Q5_K,
    "blk.0.ffn_up.weight": QT.BF16,
    "blk.0.ffn_down.weight": QT.Q6_K,
    "blk.1.attn_q.weight": QT.Q4_K,
    "blk.1.attn_k.weight": QT.F16,
    "blk.1.attn_v.weight": QT.Q8_0,
    "blk.1.attn_output.weight": QT.Q5_K,
    "blk.1.ffn_gate.weight": QT.Q4_0,
    "blk.1.ffn_up.weight": QT.Q4_1,
    "blk.1.ffn_down.weight": QT.F32,
    # every *_norm.weight: F32
}


def build_tiny_spm_gguf(out):
    name = "tiny-spm-gguf"
    d = out / name
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    log(f"{name}: training sentencepiece")
    sp = train_spm(d)
    tok = spm_hf_tokenizer(sp, d, LLAMA2_TEMPLATE)
    n_vocab = sp.get_piece_size()

    # The HF tokenizer must reproduce sentencepiece itself (plus BOS) on text without special tokens.
    texts = [t for t in TOKENIZE_TEXTS + fuzz_texts(3000, SEED) if "<s>" not in t and "</s>" not in t and "<unk>" not in t]
    bad = [t for t in texts if tok(t)["input_ids"] != [1] + sp.encode(t)]
    assert not bad, f"HF tokenizer != sentencepiece on {len(bad)} texts, e.g. {bad[:3]!r}"
    log(f"  HF tokenizer == sentencepiece on {len(texts)} texts")

    # Random llama weights (HF layout), then the GGUF exactly as convert_hf_to_gguf.py + quantize would write it.
    cfg = LlamaConfig(
        vocab_size=n_vocab,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
    )
    torch.manual_seed(SEED + 4)
    hf = LlamaForCausalLM(cfg).eval()
    randomize(hf, SEED + 4)
    sd = {k: v.detach().float().numpy() for k, v in hf.state_dict().items()}
    n_head, n_kv = cfg.num_attention_heads, cfg.num_key_value_heads

    gguf_tensors = {"token_embd.weight": sd["model.embed_tokens.weight"],
                    "output_norm.weight": sd["model.norm.weight"],
                    "output.weight": sd["lm_head.weight"]}
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        gguf_tensors.update({
            f"blk.{i}.attn_norm.weight": sd[p + "input_layernorm.weight"],
            f"blk.{i}.attn_q.weight": llama_permute(sd[p + "self_attn.q_proj.weight"], n_head, n_head),
            f"blk.{i}.attn_k.weight": llama_permute(sd[p + "self_attn.k_proj.weight"], n_head, n_kv),
            f"blk.{i}.attn_v.weight": sd[p + "self_attn.v_proj.weight"],
            f"blk.{i}.attn_output.weight": sd[p + "self_attn.o_proj.weight"],
            f"blk.{i}.ffn_norm.weight": sd[p + "post_attention_layernorm.weight"],
            f"blk.{i}.ffn_gate.weight": sd[p + "mlp.gate_proj.weight"],
            f"blk.{i}.ffn_up.weight": sd[p + "mlp.up_proj.weight"],
            f"blk.{i}.ffn_down.weight": sd[p + "mlp.down_proj.weight"],
        })

    gguf_name = "tiny-spm.gguf"
    gpath = d / gguf_name
    w = gguf.GGUFWriter(str(gpath), "llama")
    w.add_name("tiny-spm-llama")
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_rope_dimension_count(cfg.hidden_size // n_head)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_rope_freq_base(cfg.rope_parameters["rope_theta"])
    w.add_vocab_size(n_vocab)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_K_M)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    tokens, scores, types = [], [], []
    for i in range(n_vocab):
        tokens.append(sp.id_to_piece(i).encode("utf-8"))
        scores.append(float(sp.get_score(i)))
        if sp.is_unknown(i):
            types.append(gguf.TokenType.UNKNOWN)
        elif sp.is_control(i):
            types.append(gguf.TokenType.CONTROL)
        elif sp.is_byte(i):
            types.append(gguf.TokenType.BYTE)
        elif sp.is_unused(i):
            types.append(gguf.TokenType.UNUSED)
        else:
            types.append(gguf.TokenType.NORMAL)
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(sp.bos_id())
    w.add_eos_token_id(sp.eos_id())
    w.add_unk_token_id(sp.unk_id())
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(True)
    w.add_chat_template(LLAMA2_TEMPLATE)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)

    rng = np.random.default_rng(SEED + 5)
    stored_types = {}
    order = ["token_embd.weight"] + [k for k in gguf_tensors if k.startswith("blk.")] + ["output_norm.weight", "output.weight"]
    for tname in order:
        arr = np.ascontiguousarray(gguf_tensors[tname], dtype=np.float32)
        qt = QT.F32 if tname.endswith("norm.weight") else SPM_TENSOR_TYPES[tname]
        stored_types[tname] = qt.name
        if qt == QT.F32:
            w.add_tensor(tname, arr)
        elif qt == QT.F16:
            w.add_tensor(tname, arr.astype(np.float16))
        elif qt in KQUANT_LAYOUT:
            w.add_tensor(tname, random_kquant(arr.shape[0], arr.shape[1], qt, float(arr.std()), rng), raw_dtype=qt)
        else:  # Q8_0, Q4_0, Q4_1, BF16 via gguf-py's reference quantizer
            w.add_tensor(tname, gguf.quants.quantize(arr, qt), raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    log(f"  wrote {gpath.name} ({gpath.stat().st_size} bytes): {sorted(set(stored_types.values()))}")

    # Load back through transformers; that is the reference model.
    model = gguf_model(gpath)
    msd = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    reader = gguf.GGUFReader(str(gpath))
    hf_names = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
                "output.weight": "lm_head.weight"}
    for i in range(cfg.num_hidden_layers):
        for g_, h_ in [("attn_norm", "input_layernorm"), ("attn_q", "self_attn.q_proj"), ("attn_k", "self_attn.k_proj"),
                       ("attn_v", "self_attn.v_proj"), ("attn_output", "self_attn.o_proj"),
                       ("ffn_norm", "post_attention_layernorm"), ("ffn_gate", "mlp.gate_proj"),
                       ("ffn_up", "mlp.up_proj"), ("ffn_down", "mlp.down_proj")]:
            hf_names[f"blk.{i}.{g_}.weight"] = f"model.layers.{i}.{h_}.weight"
    max_quant_err = {}
    for t in reader.tensors:
        deq = gguf.quants.dequantize(t.data, t.tensor_type).reshape(gguf_tensors[t.name].shape)
        if ".attn_q." in t.name:
            deq = llama_unpermute(deq, n_head, n_head)
        elif ".attn_k." in t.name:
            deq = llama_unpermute(deq, n_head, n_kv)
        got = msd[hf_names[t.name]]
        assert np.array_equal(deq.astype(np.float32), got), f"transformers loaded {t.name} differently"
        if t.tensor_type.name not in ("Q4_K", "Q5_K", "Q6_K"):  # those are random blocks, not quantized hf weights
            orig = sd[hf_names[t.name]]
            rel = float(np.abs(got - orig).max() / np.abs(orig).max())
            max_quant_err[t.name] = rel
            assert rel < 0.25, f"{t.name}: un-permuted weights far from the originals ({rel})"
    log(f"  transformers' GGUF load == unpermute(dequantize(stored)) for all {len(reader.tensors)} tensors")

    # transformers' own tokenizer conversion of this GGUF, compared with the HF tokenizer.
    gtok = AutoTokenizer.from_pretrained(str(d), gguf_file=gguf_name)
    fz = fuzz_texts(3000, SEED)
    conv_diffs = {
        "add_special_tokens=True": compare_tokenizers(tok, gtok, TOKENIZE_TEXTS + fz, True),
        "add_special_tokens=False": compare_tokenizers(tok, gtok, TOKENIZE_TEXTS + fz, False),
    }
    n_texts = len(TOKENIZE_TEXTS) + len(fz)
    for k, v in conv_diffs.items():
        log(f"  transformers GGUF tokenizer vs HF tokenizer ({k}): {len(v)}/{n_texts} texts differ")
    gguf_tok_report = {
        "texts_compared": n_texts,
        "pre_tokenizer": str(gtok.backend_tokenizer.pre_tokenizer),
        "normalizer": str(gtok.backend_tokenizer.normalizer),
        "differences": {k: v[:12] for k, v in conv_diffs.items()},
        "difference_counts": {k: len(v) for k, v in conv_diffs.items()},
    }

    extra = {
        "gguf_tensor_types": stored_types,
        "tokenizer_files": ["tokenizer.json", "tokenizer_config.json", "tokenizer.model"],
        "transformers_gguf_tokenizer_vs_hf": gguf_tok_report,
        "non_kquant_max_rel_error_vs_f32_original": max_quant_err,
    }
    write_reference(d, name, gguf_name, "gguf", "gguf:mixed", model, tok, [sp.eos_id()], sp.eos_id(),
                    INST_CHATS, [(ALTERNATION_ERROR_CHAT, True)], extra=extra)
    del model
