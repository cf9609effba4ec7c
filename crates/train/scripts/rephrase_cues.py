#!/usr/bin/env python3
"""Rewrites the operator cues of a `hat data gen` file with a wider set of train phrasings
(NEW_PIN, NEW_SALE below: the generator's own plus ones that vary the order and marks of the
figures), changing nothing else, so that a training run on the result is an A/B of the
phrasings alone against a run on the original (session 42, docs/results.md: no gain, so the
generator in crates/tasks/src/gen.rs keeps its own lists).

Each `cue_pin` / `cue_flash_sale` trajectory's cue text is parsed with the phrasing it was
written in (the generator's four pin and three sale train phrasings), and written again in one
drawn (seeded) from the wider list whose slots match: a pin cue that
named the link keeps naming the link, one that named the product keeps the product. The figures,
the calls and every other line stay as they were.

Usage: rephrase_cues.py IN.jsonl OUT.jsonl [SEED]
"""
import random
import re
import sys

from jsonl_records import rewrite

OLD_PIN = [
    "pin {product} now",
    "put link {link} on screen please",
    "pin the {product} link, viewers are asking",
    "next up {product}, pin it",
]
OLD_SALE = [
    "start a {minutes}-minute flash sale on {product}, {pct}% off",
    "flash sale {product}: {pct}% off for {minutes} minutes, go",
    "kick off {pct}% off {product} for {minutes} min",
]
NEW_PIN = OLD_PIN + [
    "pin {product} for the viewers",
    "link {link} up top now please",
    "get {product} pinned, it's next",
    "time to pin link {link}",
    "{product} is up next, please pin its link",
    "pin #{link}, we're showing it now",
]
NEW_SALE = OLD_SALE + [
    "{pct} percent off {product} for the next {minutes} minutes",
    "{product}: {minutes}-minute deal at {pct}% off",
    "give {product} {pct}% off, timer {minutes} min",
    "set a {minutes} minute flash deal on {product}, {pct} percent discount",
    "{pct}% off on {product}, {minutes}-min window, start now",
    "flash deal for {minutes} minutes: {product} at {pct} percent off",
    "{product} sale now, {minutes} mins, {pct}% off",
    "discount {product} by {pct}% for {minutes} minutes",
]
PREFIX = "[operator_cue] (backstage, not visible to viewers) "


def pattern(t):
    parts = re.split(r"(\{\w+\})", t)
    rx = "".join(f"(?P<{p[1:-1]}>.+?)" if p.startswith("{") else re.escape(p) for p in parts)
    return re.compile(rx + "$")


def parse(text, templates):
    for t in templates:
        m = pattern(t).match(text)
        if m:
            return m.groupdict()
    raise SystemExit(f"cue not in a known phrasing: {text!r}")


def main():
    if len(sys.argv) not in (3, 4) or (len(sys.argv) == 4 and not sys.argv[3].isdigit()):
        raise SystemExit("usage: rephrase_cues.py IN.jsonl OUT.jsonl [SEED (a whole number)]")
    src, dst = sys.argv[1], sys.argv[2]
    rng = random.Random(int(sys.argv[3]) if len(sys.argv) > 3 else 42)
    changed = 0

    def rephrase(d, n):
        nonlocal changed
        try:
            kind = d["task_type"]
            messages = d["messages"]
        except KeyError as e:
            raise SystemExit(f"{src}:{n}: not a `hat data gen` record ({e!r})")
        if kind not in ("cue_pin", "cue_flash_sale"):
            return False
        old, new = (OLD_PIN, NEW_PIN) if kind == "cue_pin" else (OLD_SALE, NEW_SALE)
        for m in messages:
            if m["role"] == "user" and m["content"].startswith(PREFIX):
                slots = parse(m["content"][len(PREFIX):], old)
                fits = [t for t in new if set(re.findall(r"\{(\w+)\}", t)) == set(slots)]
                t = rng.choice(fits)
                for k, v in slots.items():
                    t = t.replace("{" + k + "}", v)
                m["content"] = PREFIX + t
                changed += 1
        return True

    rewrite(src, dst, rephrase)
    print(f"{changed} cues rephrased -> {dst}")


if __name__ == "__main__":
    main()
