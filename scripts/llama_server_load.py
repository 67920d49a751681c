#!/usr/bin/env python3
"""Sends the first N prompts at once to a running llama-server and reports aggregate speed.

One thread per request, so all N are in flight together and the server batches them
across its slots. Stdlib only. Prints one JSON line; exits non-zero if any request
fails or stops short of --max-tokens.
Usage: llama_server_load.py --url http://127.0.0.1:PORT --prompts FILE --concurrency N --max-tokens M
"""
import argparse
import json
import sys
import threading
import time
import urllib.error
import urllib.request


def complete(url: str, prompt: str, max_tokens: int) -> tuple[int, dict]:
    body = json.dumps({"prompt": prompt, "n_predict": max_tokens, "ignore_eos": True,
                       "temperature": 0, "cache_prompt": False}).encode()
    req = urllib.request.Request(url.rstrip("/") + "/completion", data=body,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=3600) as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as e:
        return e.code, {"error": e.read().decode(errors="replace")}
    except OSError as e:
        return 0, {"error": str(e)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--concurrency", type=int, required=True)
    ap.add_argument("--max-tokens", type=int, required=True)
    args = ap.parse_args()

    with open(args.prompts) as f:
        prompts = [json.loads(line)["prompt"] for line in f if line.strip()][:args.concurrency]
    if len(prompts) < args.concurrency:
        sys.exit(f"{args.prompts}: {len(prompts)} prompts, need {args.concurrency}")

    results: list = [None] * len(prompts)

    def worker(i: int) -> None:
        results[i] = complete(args.url, prompts[i], args.max_tokens)

    # Daemon threads: Ctrl-C exits at once instead of waiting out every request.
    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(len(prompts))]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():  # join in slices: a bare join() can miss Ctrl-C
            t.join(timeout=0.5)
    wall = time.perf_counter() - start

    for i, (status, resp) in enumerate(results):
        if status != 200:
            sys.exit(f"request {i}: HTTP {status}: {resp.get('error')}")
        if resp.get("tokens_predicted") != args.max_tokens:
            sys.exit(f"request {i}: tokens_predicted={resp.get('tokens_predicted')}, "
                     f"expected {args.max_tokens}")
    generated = sum(r["tokens_predicted"] for _, r in results)
    print(json.dumps({
        "concurrency": args.concurrency,
        "requests": len(results),
        "generated_tokens": generated,
        "prompt_tokens": sum(r.get("tokens_evaluated", 0) for _, r in results),
        "wall_s": round(wall, 3),
        "gen_tok_per_s": round(generated / wall, 2),
    }))


if __name__ == "__main__":
    main()
