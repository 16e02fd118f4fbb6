#!/usr/bin/env python3
"""Writes tests/fixtures/tokenizer-json/: small Hugging Face tokenizer folders
made by the real transformers / tokenizers, with the ids they give, for
tests/test_tokenizer_json.c (which runs without Python).

Pinned versions (the script refuses others, so the fixtures always say what
made them): transformers 5.24.0, tokenizers 0.23.3.

Usage:
    python tools/make-tokenizer-json-fixture.py [--ember PATH] [OUT]
OUT defaults to tests/fixtures/tokenizer-json; PATH is the `ember` binary
(default build/cli/ember, or $EMBER_CLI), used for the save round trip.
The bert-base-uncased vocabulary and SST-2 come from ../shared/data (or
$EMBER_SHARED_DATA); the small fixture vocabulary is made up here.

Folders (each with <name>.tsv beside it: text, pair, ids, type_ids):
  bert_uncased/      BertTokenizer(vocab=...) saved by transformers: BertNormalizer
                     (uncased), BertPreTokenizer, TemplateProcessing
  bert_cased/        the same with do_lower_case=False, strip_accents=False
  sequence/          the tokenizers library: Sequence[NFD, Lowercase, StripAccents],
                     Sequence[WhitespaceSplit, Punctuation], BertProcessing,
                     max_input_chars_per_word 12 (class TokenizersBackend)
  bert_config_cased/ bert_uncased's tokenizer.json with a tokenizer_config.json that
                     says do_lower_case false, and a special_tokens_map.json that
                     overrides its mask_token (transformers follows the config files)
  vocab_only/        vocab.txt + tokenizer_config.json (cased): ids of the Python
                     BertTokenizer (BertTokenizerLegacy), ember's rule for vocab.txt
  bpe/, bytelevel/   a BPE model, and a WordPiece model behind a ByteLevel
                     pre-tokenizer: for refusal tests (no .tsv)
  roundtrip_ids.tsv  ember's save of bert-base-uncased/vocab.txt (`ember tokenize
                     --save`) loaded by AutoTokenizer: the ids it gives
"""
import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile

import tokenizers
import transformers
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from transformers import AutoTokenizer, BertTokenizer, PreTrainedTokenizerFast
from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy

PINNED = {"transformers": "5.24.0", "tokenizers": "0.23.3"}
FOUND = {"transformers": transformers.__version__, "tokenizers": tokenizers.__version__}
if FOUND != PINNED:
    sys.exit(f"make-tokenizer-json-fixture: needs {PINNED}, found {FOUND}")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SHARED = os.environ.get("EMBER_SHARED_DATA", os.path.join(ROOT, "..", "shared", "data"))
SPECIALS = ["[PAD]", "[unused0]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def sst2_dev(n):
    with open(os.path.join(SHARED, "sst2", "dev.tsv"), encoding="utf-8") as f:
        next(f)
        return [line.rstrip("\n").split("\t")[0] for _, line in zip(range(n), f)]


def make_vocab():
    """A few hundred tokens: specials, characters, continuations, frequent SST-2 words, some pieces."""
    toks = list(SPECIALS)
    chars = [chr(c) for c in range(33, 127)]
    chars += list("éèêëàâäåçñöüßøæ") + list("ÉÀÅÇÑÖÜ") + list("αβγδεοσςλΣΟΔ") + list("中文字日本语")
    chars += ["\u0915", "\u093e", "\u0301", "\u20dd", "\u00ad", "\u2603", "\U0002b820", "\U0002b920"]
    toks += chars
    toks += ["##" + c for c in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"]
    toks += ["##" + c for c in "éèçñöüσςοδλ文字语\u093e\u0301"]
    counts = collections.Counter(w for s in sst2_dev(872) for w in s.split() if w.isalpha())
    toks += [w for w, _ in counts.most_common(150)]
    toks += ["hello", "world", "Hello", "World", "The", "It", "caf", "cafe", "café", "naive", "resume",
             "##s", "##ing", "##ed", "##ly", "##er", "##es", "##n", "##t", "un", "##aff", "##able", "don", "οδοσ",
             "οδος", "ista", "##nbul", "istanbul", "İ", "##ll", "##lo", "##e", "strasse", "straße"]
    seen, out = set(), []
    for t in toks:
        if t not in seen:
            seen.add(t)
            out.append(t)
    return {t: i for i, t in enumerate(out)}


HARD = [
    "Hello, World!", "don't stop!!", "ΟΔΟΣ σοφός Σ aΣ.", "İstanbul İİ", "hello[SEP]world [cls] [CLS][MASK]x[PAD] [UNK]",
    "[CL\u00adS] [CL\x01S] [unused0] [MASK]", "a\u2028b\u2029c\u0085d\u00a0e\u3000f\x0bg\x0ch\x1ci",
    "x\u00adx zero\u200bwidth \u200d\ufeffjoin", "tab\there\nnew\rline\x7fdel \x01ctl",
    "\u4e2d\u6587\u5b57 mixed\u4e2dtext \u65e5\u672c\u8bed", "\U0002b81f \U0002b820 \U0002b920 a\U0002b820b",
    "e\u0301 cafe\u0301 caf\u00e9 CAF\u00c9 na\u00efve \u00c5ngstr\u00f6m", "\u212b \u2126 \ufb01ne \uff21\uff22\uff23",
    "\u00abquoted\u00bb \u00bfqu\u00e9? \u2014dash\u2014 \u2026 \u201csmart\u201d", "$5 \u20ac5 #tag @user ^_^ ~x~ `tick`",
    "emoji \U0001F916 \U0001F600! \u2603", "a" * 12, "a" * 13, "b" + "\u00e9" * 11, "a" * 100, "a" * 101,
    "\ufffd\ufffdx\ufffd", "   leading and trailing   ", "", "\u0301\u0301", "\u0915\u093e \u0915\u093e\u0915 a\u20dd",
    "STRASSE Stra\u00dfe \u1e9e", "unaffable UNAFFABLE", "The movie is good , but not great .",
    "It's a funny film, isn't it?", "Σ", "ΣΣ ΟΔΟΣ.", "\u03a3\u0301", "A\u0308 a\u0308 O\u0308",
]
PAIRS = [("a b c d e f", "g h"), ("Hello", "WORLD!"), ("", "x y"), ("caf\u00e9", "CAF\u00c9"), ("[SEP]", "[CLS] a")]


def esc(s):
    out = []
    for ch in s:
        o = ord(ch)
        if ch == "\\":
            out.append("\\\\")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif o < 0x20 or o == 0x7F:
            out.append("\\x%02x" % o)
        else:
            out.append(ch)
    return "".join(out)


def write_tsv(path, rows):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write("text\tpair\tids\ttype_ids\n")
        for text, pair, ids, types in rows:
            p = "\\N" if pair is None else esc(pair)
            f.write(f"{esc(text)}\t{p}\t{' '.join(map(str, ids))}\t{' '.join(map(str, types))}\n")


def cases(tok, texts, pairs, backend=None):
    """(text, pair, ids, type_ids) through tok (a transformers tokenizer); backend (a tokenizers.Tokenizer)
    must agree when given."""
    rows = []
    for text, pair in [(t, None) for t in texts] + list(pairs):
        enc = tok(text, pair, return_token_type_ids=True) if pair is not None else tok(text, return_token_type_ids=True)
        ids, types = enc["input_ids"], enc["token_type_ids"]
        if backend is not None:
            e = backend.encode(text, pair) if pair is not None else backend.encode(text)
            assert e.ids == ids and e.type_ids == types, (text, pair, e.ids, ids)
        rows.append((text, pair, ids, types))
    return rows


def fresh(path):
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ember", default=os.environ.get("EMBER_CLI") or os.path.join(ROOT, "build", "cli", "ember"))
    ap.add_argument("out", nargs="?", default=os.path.join(ROOT, "tests", "fixtures", "tokenizer-json"))
    a = ap.parse_args()
    out = a.out
    os.makedirs(out, exist_ok=True)
    vocab = make_vocab()
    texts = HARD + sst2_dev(30)
    ids = {t: vocab[t] for t in SPECIALS}

    # (a) uncased, as transformers' BertTokenizer saves it
    d = os.path.join(out, "bert_uncased")
    fresh(d)
    BertTokenizer(vocab=dict(vocab)).save_pretrained(d)
    tok = AutoTokenizer.from_pretrained(d)
    assert type(tok).__name__ == "BertTokenizer" and tok.is_fast
    write_tsv(d + ".tsv", cases(tok, texts, PAIRS, Tokenizer.from_file(os.path.join(d, "tokenizer.json"))))

    # (b) cased, strip_accents False
    d = os.path.join(out, "bert_cased")
    fresh(d)
    BertTokenizer(vocab=dict(vocab), do_lower_case=False, strip_accents=False).save_pretrained(d)
    tok = AutoTokenizer.from_pretrained(d)
    write_tsv(d + ".tsv", cases(tok, texts, PAIRS, Tokenizer.from_file(os.path.join(d, "tokenizer.json"))))

    # (c) Sequence normalizer and pre-tokenizer, BertProcessing, built with the tokenizers library
    d = os.path.join(out, "sequence")
    fresh(d)
    tk = Tokenizer(models.WordPiece(dict(vocab), unk_token="[UNK]", max_input_chars_per_word=12))
    tk.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.Lowercase(), normalizers.StripAccents()])
    tk.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation()])
    tk.post_processor = processors.BertProcessing(("[SEP]", ids["[SEP]"]), ("[CLS]", ids["[CLS]"]))
    tk.decoder = decoders.WordPiece()
    tk.add_special_tokens(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]",
                            pad_token="[PAD]", mask_token="[MASK]").save_pretrained(d)
    tok = AutoTokenizer.from_pretrained(d)
    write_tsv(d + ".tsv", cases(tok, texts, PAIRS, Tokenizer.from_file(os.path.join(d, "tokenizer.json"))))

    # (e) the config files win: do_lower_case false in tokenizer_config.json, mask_token from the map
    d = os.path.join(out, "bert_config_cased")
    fresh(d)
    shutil.copy(os.path.join(out, "bert_uncased", "tokenizer.json"), d)
    with open(os.path.join(out, "bert_uncased", "tokenizer_config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    cfg.update(do_lower_case=False, mask_token="[MASK]", model_max_length=64)
    with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=2, ensure_ascii=False)
    with open(os.path.join(d, "special_tokens_map.json"), "w", encoding="utf-8") as f:
        json.dump({"mask_token": {"content": "[unused0]", "lstrip": False, "normalized": False, "rstrip": False,
                                  "single_word": False}}, f, indent=2)
    tok = AutoTokenizer.from_pretrained(d)
    assert tok.mask_token == "[unused0]" and tok.model_max_length == 64
    write_tsv(d + ".tsv", cases(tok, texts, PAIRS))

    # vocab.txt only (+ a cased config): the Python BertTokenizer's ids, ember's rule for vocab.txt
    d = os.path.join(out, "vocab_only")
    fresh(d)
    with open(os.path.join(d, "vocab.txt"), "w", encoding="utf-8", newline="\n") as f:
        f.write("".join(t + "\n" for t in sorted(vocab, key=vocab.get)))
    with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"do_lower_case": False, "model_max_length": 128, "tokenizer_class": "BertTokenizer"}, f, indent=2)
    tok = BertTokenizerLegacy(os.path.join(d, "vocab.txt"), do_lower_case=False)
    write_tsv(d + ".tsv", cases(tok, texts, PAIRS))

    # (d) refusals: a BPE model (ByteLevel everywhere), a WordPiece model behind a ByteLevel pre-tokenizer
    d = os.path.join(out, "bpe")
    fresh(d)
    bpe = Tokenizer(models.BPE({"a": 0, "b": 1, "ab": 2, "<unk>": 3}, [("a", "b")], unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel()
    bpe.decoder = decoders.ByteLevel()
    bpe.save(os.path.join(d, "tokenizer.json"))
    d = os.path.join(out, "bytelevel")
    fresh(d)
    bl = Tokenizer(models.WordPiece(dict(vocab), unk_token="[UNK]"))
    bl.pre_tokenizer = pre_tokenizers.ByteLevel()
    bl.decoder = decoders.ByteLevel()
    bl.save(os.path.join(d, "tokenizer.json"))

    # the save round trip: ember writes bert-base-uncased, transformers reads it
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([a.ember, "tokenize", "--vocab", os.path.join(SHARED, "bert-base-uncased", "vocab.txt"),
                        "--save", tmp], check=True)
        tok = AutoTokenizer.from_pretrained(tmp)
        assert type(tok).__name__ == "BertTokenizer" and tok.is_fast, type(tok)
        rt = HARD + sst2_dev(180)
        rows = cases(tok, rt, PAIRS, Tokenizer.from_file(os.path.join(tmp, "tokenizer.json")))
    write_tsv(os.path.join(out, "roundtrip_ids.tsv"), rows)

    with open(os.path.join(out, "README.md"), "w", encoding="utf-8") as f:
        f.write(README.format(**FOUND, py=sys.version.split()[0]))
    print("wrote", out)


README = """# Hugging Face tokenizer folders for tests/test_tokenizer_json.c

Generated by `tools/make-tokenizer-json-fixture.py` (read its docstring) with
transformers {transformers}, tokenizers {tokenizers}, Python {py}; do not edit.

The vocabulary of the small folders is made up (a few hundred tokens: the
special tokens, single characters, `##` continuations, frequent SST-2 words).
Each `<name>.tsv` has the columns text, pair (`\\N`: none), ids, type_ids;
text and pair escape backslash, tab, LF, CR and other C0 controls
(`\\\\ \\t \\n \\r \\xHH`). The ids are those of `AutoTokenizer.from_pretrained`
(checked against `tokenizers.Tokenizer.from_file` where the class reads
tokenizer.json as written), except `vocab_only.tsv`: the Python
`BertTokenizerLegacy`, whose rules ember follows for vocab.txt.

`roundtrip_ids.tsv`: `ember tokenize --vocab bert-base-uncased/vocab.txt
--save DIR`, then the ids `AutoTokenizer.from_pretrained(DIR)` (a fast
BertTokenizer) gives for hard cases and the first 180 SST-2 dev sentences.
"""

if __name__ == "__main__":
    main()
