#!/usr/bin/env python3
"""Writes the product listing of a `hat data gen` file's system prompts in another order,
changing nothing else, so that a training run on the result is an A/B of the listing order
alone against a run on the original (session 43, docs/results.md).

Why: the world lists a stream's products by id (P1, P2, ...), so a product's line number and
its id agree, and a model trained only on such listings can find an id by the line's place
instead of reading it off the line. Leg 7's wrong-product look-ups are almost all the id of an
adjacent line (14 of 23 on lsqa), and with the same prompts listed by title they stay adjacent
lines in the new order while their number grows (23 -> 37).

A scene's system prompt is shuffled with probability FRACTION, decided and permuted from a hash
of the prompt and SEED, so records that share a system prompt (a shared scene, packed as one
prefix) keep sharing it. The listing is found in each of the training templates' forms: markdown
lines (`- P3 #1 Title ...`), XML elements (`<product id="P3" ...>...</product>`, one a line) and
TOML tables (`[[stream.products]]` blocks); a prompt with none of them is left as it is and
counted.

Usage: shuffle_listing.py IN.jsonl OUT.jsonl [FRACTION (0-1, default 0.5)] [SEED (default 43)]
"""
import hashlib
import random
import re
import sys

from jsonl_records import rewrite

MARKDOWN = re.compile(r"^- P\d+ #\d+ .*$", re.M)
XML = re.compile(r'^<product id="[^"]*".*</product>$', re.M)
TOML_BLOCK = re.compile(r"\[\[stream\.products\]\]\n(?:[^\n\[][^\n]*\n?)*")


def permuted(items, rng):
    order = list(range(len(items)))
    while order == sorted(order):
        rng.shuffle(order)
    return [items[i] for i in order]


def shuffle_lines(text, rx, rng):
    """Permutes the one contiguous run of lines that `rx` matches; None when there is none."""
    lines = text.split("\n")
    hits = [i for i, l in enumerate(lines) if rx.fullmatch(l)]
    if len(hits) < 2 or hits != list(range(hits[0], hits[-1] + 1)):
        return None
    lines[hits[0] : hits[-1] + 1] = permuted([lines[i] for i in hits], rng)
    return "\n".join(lines)


def shuffle_toml(text, rng):
    """Permutes the run of `[[stream.products]]` tables (each ends at a blank line)."""
    blocks = list(TOML_BLOCK.finditer(text))
    if len(blocks) < 2:
        return None
    # a table and its separating blank line: every block but the last ends with "\n"
    start, end = blocks[0].start(), blocks[-1].end()
    bodies = [b.group(0).rstrip("\n") for b in blocks]
    run = text[start:end]
    if run.rstrip("\n") != "\n\n".join(bodies):
        return None  # something else between the tables: leave the prompt alone
    tail = run[len(run.rstrip("\n")) :]
    return text[:start] + "\n\n".join(permuted(bodies, rng)) + tail + text[end:]


def shuffle(system, fraction, seed):
    """The prompt with its listing shuffled, the prompt as it is (not drawn), or None (no
    listing found)."""
    h = hashlib.sha256(f"{seed}\0{system}".encode()).digest()
    if int.from_bytes(h[:4], "big") / 2**32 >= fraction:
        return system
    rng = random.Random(h[4:])
    for rx in (MARKDOWN, XML):
        out = shuffle_lines(system, rx, rng)
        if out is not None:
            return out
    return shuffle_toml(system, rng)


def main():
    args = sys.argv[1:]
    try:
        fraction = float(args[2]) if len(args) > 2 else 0.5
        seed = int(args[3]) if len(args) > 3 else 43
        ok = len(args) in (2, 3, 4) and 0.0 <= fraction <= 1.0
    except ValueError:
        ok = False
    if not ok:
        raise SystemExit(
            "usage: shuffle_listing.py IN.jsonl OUT.jsonl [FRACTION (0-1)] [SEED (a whole number)]"
        )
    src, dst = args[0], args[1]
    done = {}
    counts = {"shuffled": 0, "kept": 0, "no listing": 0}

    def shuffle_record(d, n):
        try:
            first = d["messages"][0]
            system = first["content"] if first["role"] == "system" else None
        except (KeyError, TypeError, IndexError) as e:
            raise SystemExit(f"{src}:{n}: not a `hat data gen` record ({e!r})")
        if system is None:
            counts["no listing"] += 1
            return False
        if system not in done:
            done[system] = shuffle(system, fraction, seed)
        new = done[system]
        if new is None:
            counts["no listing"] += 1
        elif new == system:
            counts["kept"] += 1
        else:
            counts["shuffled"] += 1
            first["content"] = new
            return True
        return False

    rewrite(src, dst, shuffle_record)
    print(
        f"{dst}: {counts['shuffled']} records with the listing shuffled, {counts['kept']} kept, "
        f"{counts['no listing']} without a listing; {len(done)} system prompts"
    )


if __name__ == "__main__":
    main()
