"""Why agent-suite items fail, and the pass rate per call syntax of the harness state.

Usage: python3 failure_breakdown.py RUN/hvqa/items.jsonl [ORACLE/hvqa/items.jsonl]

Groups every failed item of a `hat eval` items.jsonl by the first component its scorer
reason names (call format, by syntax; schema errors from renamed or typed parameters; unknown
tool names; wrong or missing tool; the wrong product; other wrong argument values; facts only);
then how far wrong product ids are from the right ones, how many items call a tool again with
other arguments ("looks again") and how many episodes never reply. With the same suite's
oracle run (`hat eval --model oracle --suite hvqa --out ORACLE`), also prints the pass rate per
call syntax, read from how the oracle wrote its calls in each harness state.
"""

import collections
import json
import re
import sys


def reason_class(r: str) -> str:
    if "format:" in r:
        if "<invoke" in r:
            return "format: xml-invoke"
        if any(k in r for k in ("CALL", "parentheses", "key=value", "after the call", "JSON value")):
            return "format: function (CALL)"
        return "format: other"
    if any(k in r for k in ("required property", "is not of type", "is not one of", "dditional")):
        return "arguments: schema (renamed or typed parameters)"
    if "unknown tool" in r:
        return "calls: unknown tool name"
    if "calls:" in r and "did not call" in r:
        return "calls: wrong or no tool"
    if re.search(r'`product` is "P\d+", expected', r):
        return "arguments: wrong product"
    if "arguments:" in r:
        return "arguments: wrong value"
    if "facts:" in r:
        return "facts only"
    return "other"


def syntax_of(text: str):
    for prefix, name in (("<invoke", "xml-invoke"), ("CALL ", "function"), ("<tool_call>", "json-tags"),
                         ("```tool", "json-block"), ("[[", "bracket"), ("<tool_use>", "tool-use"),
                         ("Action:", "react"), ("<function=", "function-tag"), ("<call tool=", "call-attr")):
        if text.startswith(prefix):
            return name
    return None


def main() -> None:
    items = [json.loads(l) for l in open(sys.argv[1])]
    failed = [d for d in items if not d["pass"]]
    print(f"{len(items)} items, {len(failed)} failed")
    for k, v in collections.Counter(reason_class(d["reason"]) for d in failed).most_common():
        print(f"  {k}: {v}")
    # how far a wrong product id is from the right one (+1: the catalog line after it)
    off = collections.Counter()
    for d in failed:
        for got, want in re.findall(r'`product` is "P(\d+)", expected "P(\d+)"', d["reason"]):
            off[int(got) - int(want)] += 1
    print("  wrong product id - right id:", dict(sorted(off.items())))
    # looking again: two or more turns of calls, and a tool called again with other arguments
    # (two look-ups of one tool in a single turn, as a comparison makes, do not count)
    again = [d for d in items
             if sum(m["role"] == "assistant" for m in d["output"]) >= 3 and any(
                 c["name"] == e["name"] and c["arguments"] != e["arguments"]
                 for k, c in enumerate(d.get("calls", [])) for e in d["calls"][:k])]
    print(f"  looks again: {len(again)} items ({sum(d['pass'] for d in again)} pass); "
          f"never replies: {sum('no reply' in d['reason'] for d in items)}")
    if len(sys.argv) > 2:
        syntax = {}
        for l in open(sys.argv[2]):
            d = json.loads(l)
            for m in d["output"]:
                s = syntax_of(m["content"]) if m["role"] == "assistant" else None
                if s:
                    syntax[d["harness_hash"]] = s
        total, ok = collections.Counter(), collections.Counter()
        for d in items:
            s = syntax.get(d["harness_hash"], "unknown")
            total[s] += 1
            ok[s] += d["pass"]
        for s in sorted(total):
            print(f"  {s}: {ok[s]}/{total[s]} ({100 * ok[s] / total[s]:.0f}%)")


if __name__ == "__main__":
    main()
