"""Rewriting a `hat data gen` JSONL file record by record, for the scripts beside this one
(rephrase_cues.py, shuffle_listing.py): the input is read whole first, so the output may not
be the input itself (refused) and a bad record stops the run before anything is written; lines
a transform leaves alone are written back byte for byte, changed ones compactly; the output
appears at once when done (written beside it, then renamed)."""
import json
import os


def rewrite(src, dst, transform):
    """Applies `transform(record, line_number)` to every record of `src` and writes the result
    to `dst`; `transform` changes the record in place and returns whether it did. Errors name
    the file and line and exit with status 1."""
    if os.path.exists(dst) and os.path.exists(src) and os.path.samefile(src, dst):
        raise SystemExit(f"{dst}: the output would overwrite the input; give another path")
    try:
        with open(src, encoding="utf-8") as f:
            lines = f.readlines()
    except (OSError, UnicodeDecodeError) as e:
        raise SystemExit(f"{src}: cannot be read ({e})")
    out = []
    for n, line in enumerate(lines, 1):
        try:
            d = json.loads(line)
        except ValueError as e:
            raise SystemExit(f"{src}:{n}: not a `hat data gen` record ({e!r})")
        if not isinstance(d, dict):
            raise SystemExit(f"{src}:{n}: not a `hat data gen` record (a JSON object)")
        if transform(d, n):
            line = json.dumps(d, ensure_ascii=False, separators=(",", ":")) + "\n"
        out.append(line)
    tmp = dst + ".tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.writelines(out)
        os.replace(tmp, dst)
    except OSError as e:
        raise SystemExit(f"{dst}: cannot be written ({e})")
