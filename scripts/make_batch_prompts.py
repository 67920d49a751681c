#!/usr/bin/env python3
"""Writes N JSONL lines {"prompt": "..."} of varied English prompts for batch benchmarks.

Deterministic (fixed seed) so every run and every engine sees the same prompts.
Usage: python3 scripts/make_batch_prompts.py N > prompts.jsonl
"""
import json
import random
import sys

TEMPLATES = [
    "Write a short story about {thing}.",
    "Explain {idea} in simple terms.",
    "Give three tips for someone who wants to learn about {idea}.",
    "Describe {place} to a person who has never been there.",
    "What are the pros and cons of {idea}?",
    "Write a friendly letter to {person} about {thing}.",
    "Summarize the history of {idea} in a few sentences.",
    "Imagine {person} visiting {place}. What happens next?",
    "Write a poem about {thing} in {place}.",
    "Why do people care about {idea}?",
]
THINGS = ["a lost umbrella", "a talking cat", "an old lighthouse", "a broken clock",
          "a paper boat", "a red bicycle", "a secret garden", "a tiny robot",
          "a winter storm", "a forgotten letter"]
IDEAS = ["photosynthesis", "compound interest", "the water cycle", "machine learning",
         "gravity", "democracy", "recycling", "the immune system", "supply and demand",
         "plate tectonics"]
PLACES = ["a busy market", "the top of a mountain", "a quiet library", "a desert town",
          "a city at night", "a rainforest", "a small island", "an old train station"]
PEOPLE = ["a retired teacher", "a young astronaut", "your grandmother", "a curious child",
          "a tired chef", "a famous painter", "a new neighbour"]


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().splitlines()[-1])
    rng = random.Random(42)
    n = int(sys.argv[1])
    seen: set[str] = set()  # distinct prompts, so no two sequences are identical
    for _ in range(1000 * n):
        if len(seen) == n:
            return
        prompt = rng.choice(TEMPLATES).format(
            thing=rng.choice(THINGS), idea=rng.choice(IDEAS),
            place=rng.choice(PLACES), person=rng.choice(PEOPLE))
        if prompt not in seen:
            seen.add(prompt)
            print(json.dumps({"prompt": prompt}))
    if len(seen) < n:
        sys.exit(f"only {len(seen)} distinct prompts; add templates or fillers")


if __name__ == "__main__":
    main()
