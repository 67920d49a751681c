#!/usr/bin/env python3
# requires: (standard library only)
"""Cross-check a reference.json written by scripts/reference.py against a running llama.cpp server.

Not part of CI (llama.cpp is built by hand, DESIGN.md §7). Start a server on the model the reference
names, then:

    llama-server -m models/reference/tiny-spm-gguf/tiny-spm.gguf --port 18099 -t 1 -c 512 &
    python3.11 scripts/reference_llamacpp_check.py --port 18099 models/reference/tiny-spm-gguf/reference.json

It compares every `tokenize` entry and every chat text's ids with llama.cpp's /tokenize (parse_special on),
and reports how many of the 32 greedy tokens llama.cpp reproduces for each case (llama.cpp quantizes
activations to 8 bits, so it may leave the reference at a near tie; the margin there is printed).
Exit status 1 if any tokenization differs.
"""

import argparse
import json
import sys
import urllib.request


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("reference", help="path to a reference.json")
    ap.add_argument("--port", type=int, default=18099)
    ap.add_argument("--host", default="127.0.0.1")
    args = ap.parse_args()

    def post(path, obj):
        req = urllib.request.Request(
            f"http://{args.host}:{args.port}{path}",
            data=json.dumps(obj).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req) as resp:
            return json.load(resp)

    ref = json.load(open(args.reference, encoding="utf-8"))
    bad = 0
    for t in ref["tokenize"]:
        got = post("/tokenize", {"content": t["text"], "add_special": t["add_special_tokens"], "parse_special": True})
        got = got["tokens"]
        if got != t["ids"]:
            bad += 1
            print(f"tokenize differs: {t['text']!r} add_special={t['add_special_tokens']}\n"
                  f"   reference {t['ids']}\n   llama.cpp {got}")
    print(f"tokenize: {bad}/{len(ref['tokenize'])} differ")
    for c in ref["chat"]:
        if "ids" not in c:
            continue
        got = post("/tokenize", {"content": c["text"], "add_special": False, "parse_special": True})["tokens"]
        if got != c["ids"]:
            bad += 1
            print(f"chat ids differ for {c['text']!r}")
    for c in ref["cases"]:
        out = post("/completion", {
            "prompt": c["prompt_ids"], "n_predict": len(c["greedy_ids"]), "temperature": 0, "top_k": 1,
            "samplers": ["top_k"], "ignore_eos": True, "cache_prompt": False, "return_tokens": True,
        })
        same = 0
        for a, b in zip(out.get("tokens") or [], c["greedy_ids"]):
            if a != b:
                break
            same += 1
        note = "" if same == len(c["greedy_ids"]) else f" (reference top-2 margin there: {c['top2_margin'][same]:.4f})"
        print(f"case {c['name']}: llama.cpp greedy equals the reference for {same}/{len(c['greedy_ids'])} tokens{note}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
