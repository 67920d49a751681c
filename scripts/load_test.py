#!/usr/bin/env python3
"""Load test: N streaming chat requests at once (QPS inf) against a running server,
repeated for a few rounds; errors, latency, throughput, and the server's memory
(RSS from /proc) before and after each round, so a leak shows as growth.

Usage:
  python3 scripts/load_test.py --url http://127.0.0.1:8000 --pid PID [--requests 500]
      [--max-tokens 64] [--rounds 2] [--api-key KEY] [--json out.json]
Needs: pip install aiohttp. Prompts: scripts/make_batch_prompts.py (deterministic).
"""
import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time

import aiohttp


def rss_mib(pid):
    if not pid:
        return None
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return None


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


async def one(session, url, headers, model, prompt, max_tokens):
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0.7,
        "seed": 1,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    t0 = time.perf_counter()
    ttft, usage, done, err, arrivals = None, None, False, None, []
    try:
        async with session.post(url + "/v1/chat/completions", json=body, headers=headers) as r:
            if r.status != 200:
                return {"error": f"HTTP {r.status}: {(await r.text())[:200]}"}
            async for raw in r.content:
                line = raw.decode().strip()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    done = True
                    break
                chunk = json.loads(data)
                if "error" in chunk:
                    err = chunk["error"]
                    break
                if chunk.get("usage"):
                    usage = chunk["usage"]
                for c in chunk.get("choices", []):
                    if c.get("delta", {}).get("content"):
                        now = time.perf_counter()
                        ttft = ttft if ttft is not None else now - t0
                        arrivals.append(now)
    except Exception as e:  # a dropped connection is an error, not a crash of the test
        return {"error": f"{type(e).__name__}: {e}"}
    if err or not done or usage is None:
        return {"error": f"stream incomplete: done={done} usage={usage is not None} error={err}"}
    itl = [b - a for a, b in zip(arrivals, arrivals[1:])]
    return {"ttft": ttft, "e2e": time.perf_counter() - t0, "tokens": usage["completion_tokens"],
            "prompt_tokens": usage["prompt_tokens"], "itl": itl}


async def round_(url, headers, model, prompts, max_tokens):
    conn = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=3600)
    async with aiohttp.ClientSession(connector=conn, timeout=timeout) as s:
        t0 = time.perf_counter()
        results = await asyncio.gather(*(one(s, url, headers, model, p, max_tokens) for p in prompts))
        return results, time.perf_counter() - t0


def metrics(url):
    import urllib.request
    text = urllib.request.urlopen(url + "/metrics").read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith(("vllm:num_requests_running", "vllm:kv_cache_usage_perc",
                            "vllm:num_requests_waiting")):
            name = line.split("{")[0]
            out[name] = float(line.rsplit(" ", 1)[1])
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--pid", type=int)
    ap.add_argument("--requests", type=int, default=500)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--api-key")
    ap.add_argument("--json")
    a = ap.parse_args()
    headers = {"Authorization": f"Bearer {a.api_key}"} if a.api_key else {}
    import urllib.error
    import urllib.request
    for _ in range(600):  # wait until the model has loaded
        try:
            urllib.request.urlopen(a.url + "/health")
            break
        except (urllib.error.URLError, ConnectionError):
            time.sleep(0.5)
    req = urllib.request.Request(a.url + "/v1/models", headers=headers)
    model = json.load(urllib.request.urlopen(req))["data"][0]["id"]
    gen = subprocess.run([sys.executable, "scripts/make_batch_prompts.py", "250"],
                         capture_output=True, text=True, check=True)
    base = [json.loads(line)["prompt"] for line in gen.stdout.splitlines()]
    # Distinct prompts beyond the generator's 250: number them.
    prompts = [f"{base[i % len(base)]} (request {i})" for i in range(a.requests)]

    report = {"requests": a.requests, "max_tokens": a.max_tokens, "rounds": []}
    for k in range(a.rounds):
        before = rss_mib(a.pid)
        results, wall = asyncio.run(round_(a.url, headers, model, prompts, a.max_tokens))
        time.sleep(1.0)  # let the engine publish its idle statistics
        after = rss_mib(a.pid)
        ok = [r for r in results if "error" not in r]
        errors = [r["error"] for r in results if "error" in r]
        toks = sum(r["tokens"] for r in ok)
        itl = [x for r in ok for x in r["itl"]]
        m = metrics(a.url)
        r = {
            "round": k + 1, "ok": len(ok), "errors": len(errors), "first_errors": errors[:3],
            "wall_s": round(wall, 2), "req_per_s": round(len(ok) / wall, 2),
            "output_tok_per_s": round(toks / wall, 1), "output_tokens": toks,
            "prompt_tokens": sum(r["prompt_tokens"] for r in ok),
            "ttft_p50_s": round(pct([r["ttft"] for r in ok], 50), 3),
            "ttft_p99_s": round(pct([r["ttft"] for r in ok], 99), 3),
            "e2e_p50_s": round(pct([r["e2e"] for r in ok], 50), 3),
            "e2e_p99_s": round(pct([r["e2e"] for r in ok], 99), 3),
            "itl_mean_ms": round(1000 * statistics.fmean(itl), 1) if itl else None,
            "rss_before_mib": before and round(before, 1), "rss_after_mib": after and round(after, 1),
            "after": m,
        }
        report["rounds"].append(r)
        print(json.dumps(r), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=2)
    bad = sum(r["errors"] for r in report["rounds"])
    idle = all(r["after"].get("vllm:num_requests_running", 1) == 0 and
               r["after"].get("vllm:kv_cache_usage_perc", 1) == 0 for r in report["rounds"])
    if bad or not idle:
        print(f"FAIL: {bad} errors; idle after each round: {idle}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
