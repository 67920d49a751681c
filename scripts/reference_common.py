"""Shared pieces of scripts/reference.py: imports, the inputs (prompts, texts, chats,
templates) and the helpers that run a model and write reference.json."""

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


def gguf_model(gguf_path):
    return AutoModelForCausalLM.from_pretrained(
        str(gguf_path.parent),
        gguf_file=gguf_path.name,
        dtype=torch.float32,
        quantization_config=GgufConfig(dequantize=True),
        attn_implementation="sdpa",
    ).eval()
