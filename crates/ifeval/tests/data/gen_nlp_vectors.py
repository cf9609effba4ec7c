"""Regenerates nlp_vectors.jsonl: NLTK 3.10.4 / langdetect 1.0.9 outputs on texts derived from
crates/ifeval/data/ifeval/conformance.jsonl (prompt, response, its loose variants, upper/lower case).

Usage: python gen_nlp_vectors.py CONFORMANCE_JSONL PUNKT_ENGLISH_JSON > nlp_vectors.jsonl
(PUNKT_ENGLISH_JSON: crates/ifeval/data/punkt_english.json). Needs nltk==3.10.4, langdetect==1.0.9.
"""
import json, sys
from collections import defaultdict
from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer
from nltk.tokenize.destructive import NLTKWordTokenizer
from langdetect import DetectorFactory, detect
from langdetect.lang_detect_exception import LangDetectException

d = json.load(open(sys.argv[2]))
p = PunktParameters()
p.sent_starters = set(d["sentence_starters"])
p.abbrev_types = set(d["abbrev_types"])
p.collocations = set(tuple(c) for c in d["collocations"])
p.ortho_context = defaultdict(int, d["ortho_context"])
sent_tok = PunktSentenceTokenizer(p)
word_tok = NLTKWordTokenizer()
DetectorFactory.seed = 0

def variants(response):
    r = response.split("\n")
    first = "\n".join(r[1:]).strip()
    last = "\n".join(r[:-1]).strip()
    both = "\n".join(r[1:-1]).strip()
    return [response, response.replace("*", ""), first, last, both,
            first.replace("*", ""), last.replace("*", ""), both.replace("*", "")]

def lang(t):
    try:
        return detect(t)
    except LangDetectException:
        return None

for line in open(sys.argv[1]):
    rec = json.loads(line)
    texts = [rec["prompt"]] + variants(rec["response"]) + [rec["response"].upper(), rec["response"].lower()]
    sents, upper, langs = [], [], []
    for t in texts:
        ss = sent_tok.tokenize(t)
        sents.append(len(ss))
        upper.append(sum(1 for s in ss for w in word_tok.tokenize(s) if w.isupper()))
        langs.append(lang(t))
    print(json.dumps({"key": rec["key"], "sentences": sents, "upper_words": upper, "language": langs}))
