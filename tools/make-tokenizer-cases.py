#!/usr/bin/env python3
r"""Writes tests/fixtures/tokenizer-hf/: tricky tokenizer inputs and the ids that
Hugging Face's Python BertTokenizer gives them, for tests/test_tokenizer.c.

Pinned version (the script refuses to run under others, so that the tables
always say which transformers made them):
    transformers 5.24.0  (its Python BertTokenizer is the class
                          BertTokenizerLegacy there; BertTokenizer is the
                          Rust-backed one)
    Python 3.11 (unicodedata 14.0.0)

The vocabulary is ../shared/data/bert-base-uncased/vocab.txt (or $EMBER_SHARED_DATA).
Usage:  python tools/make-tokenizer-cases.py [OUT]   (default: tests/fixtures/tokenizer-hf)

Tables (TSV with a header line; text cells escape backslash, tab, LF, CR and
other C0 controls and DEL as \\ \t \n \r \xHH, and \N is no pair):
<config>.tsv (text, pair, ids, type_ids: ids with [CLS]/[SEP]) for the default
uncased tokenizer and for cased, lower_keep_accents, cased_strip, no_chinese,
never_split and maxchars5 (max_input_chars_per_word=5) tokenizers;
pairs.tsv (text, pair, max_length, ids, type_ids: longest_first truncation at
many max_lengths; max_length 0 is none); decode.tsv (ids, skip, clean, text:
decode with and without skip_special_tokens and the cleanup).
"""
import os
import sys
import unicodedata

import transformers
from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy

PINNED = "5.24.0"
if transformers.__version__ != PINNED:
    sys.exit(f"make-tokenizer-cases: needs transformers {PINNED}, found {transformers.__version__}")

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.environ.get("EMBER_SHARED_DATA", os.path.join(HERE, "..", "..", "shared", "data"))
VOCAB = os.path.join(SHARED, "bert-base-uncased", "vocab.txt")
OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "tests", "fixtures", "tokenizer-hf")

CASES = [
    "Hello, World!", "don't stop!!", "ΟΔΟΣ ΣΑ.ΒΣ", "ΣΊΣΥΦΟΣ", "Σ", "aΣ.", "aΣb", "ΑΣ'Β", "İstanbul İİ",
    "hello[SEP]world [cls] [CLS][MASK]x[PAD] [UNK]", "[CL\u00adS] [CL\x01S]", "a\u2028b\u2029c\u0085d\u00a0e\u3000f",
    "x\u00adx zero\u200bwidth \u200d\ufeffjoin", "tab\there\nnew\rline\x0bvt\x0cff\x1cfs\x7fdel",
    "\u4e2d\u6587\u5b57 mixed\u4e2dtext \u3042\u3044\u3046 \ud55c\uad6d\uc5b4 \uf900\u2f800",
    "e\u0301 cafe\u0301 caf\u00e9 Ã© \u00c5ngstr\u00f6m na\u00efve fa\u00e7ade", "\u212b \u2126 \ufb01ne \uff21\uff22\uff23 \u2460",
    "\u00abquoted\u00bb \u00bfqu\u00e9? \u2014dash\u2014 \u2026 \u201csmart\u201d \u2018q\u2019", "$5 \u20ac5 \u00a35 5% #tag @user ^_^ ~x~ `tick`",
    "emoji \U0001F916 \U0001F600! \u2603", "a" * 100, "a" * 101, "b" + "\u00e9" * 99, "\ufffd\ufffdx\ufffd",
    "   leading and trailing   ", "", "\u0301\u0301", "\u1e9e\u00df STRASSE", "\u01c5 \u01c4 \u1f88", "DŽungla ǅ",
    "\u0130\u0307 I\u0307", "unaffable", "supercalifragilisticexpialidocious", "123,456.78 1e-5 3:45pm",
    "http://example.com/a?b=c&d=e", "C++ C# .NET node.js", "\u0928\u092e\u0938\u094d\u0924\u0947 \u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35",
    "\u05e9\u05dc\u05d5\u05dd \u0645\u0631\u062d\u0628\u0627", "\u0391\u03b8\u03ae\u03bd\u03b1 \u039c\u0391\u03aa\u039f\u03a3", "[SEP]", "[SEP][SEP]", " [CLS] ",
    "\U00020000\U0002a6df \U0002b740", "ｈｅｌｌｏ　ｗｏｒｌｄ", "x\u0345y \u1fb3 \u0390",
]
EXTRA = ["Say hello! HELLO! UPPER upper [x] [X] café CAFÉ notinvocab notinvocab."]
CONFIGS = [
    ("cased", dict(do_lower_case=False)),
    ("lower_keep_accents", dict(do_lower_case=True, strip_accents=False)),
    ("cased_strip", dict(do_lower_case=False, strip_accents=True)),
    ("no_chinese", dict(tokenize_chinese_chars=False)),
    ("never_split", dict(never_split=["hello!", "UPPER", "[x]", "caf\u00e9", "notinvocab"])),
]
PAIRS = [("one two three four five", "six seven eight nine ten"), ("a b c d e f", "g h"), ("a b", "c d e f g h i"),
         ("a b c", "d e f"), ("hello world", ""), ("", "x y z"), ("the quick brown fox jumps", "over the lazy dog")]


def esc(s):
    """A text cell: backslash, tab, LF, CR, other C0 controls and DEL escaped."""
    named = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"}
    return "".join(named.get(c) or ("\\x%02x" % ord(c) if ord(c) < 0x20 or ord(c) == 0x7F else c) for c in s)


def ints(xs):
    return " ".join(map(str, xs))


def write(name, header, rows):
    with open(os.path.join(OUT, name), "w", encoding="utf-8", newline="\n") as f:
        f.write("\t".join(header) + "\n")
        for row in rows:
            f.write("\t".join(row) + "\n")


def main():
    os.makedirs(OUT, exist_ok=True)

    def table(name, tok, texts):
        rows = []
        for s in texts:
            enc = tok(s, return_token_type_ids=True)
            assert enc["input_ids"] == tok.encode(s)
            rows.append((esc(s), "\\N", ints(enc["input_ids"]), ints(enc["token_type_ids"])))
        write(name + ".tsv", ("text", "pair", "ids", "type_ids"), rows)

    table("uncased", BertTokenizerLegacy(VOCAB), CASES)
    for name, kw in CONFIGS:
        table(name, BertTokenizerLegacy(VOCAB, **kw), CASES + EXTRA)
    tok = BertTokenizerLegacy(VOCAB)
    tok.wordpiece_tokenizer.max_input_chars_per_word = 5
    table("maxchars5", tok, ["hello helloo h\u00e9llo h\u00e9llo\u00e9 ab,cdefgh"])

    tok = BertTokenizerLegacy(VOCAB)
    rows = []
    for a, b in PAIRS:
        for m in [0, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 20]:
            enc = tok(a, b, max_length=m or None, truncation=bool(m), return_token_type_ids=True)
            rows.append((esc(a), esc(b), str(m), ints(enc["input_ids"]), ints(enc["token_type_ids"])))
    write("pairs.tsv", ("text", "pair", "max_length", "ids", "type_ids"), rows)

    rows = []
    dec = [tok.encode("It's a test, isn't it? I'm sure they've said \"we're done\" ... ok!"),
           tok.encode("hello [MASK] world [PAD] [UNK] unaffable"), [5, 30521, 30522, 99999, 101, -3, 102],
           [2009, 1005, 1055, 1005, 1055, 1012, 1012, 1029, 999, 1010],
           tok.encode("don't can't won't I've you're ' quoted '"), [], [101, 102],
           tok.convert_tokens_to_ids(["##s", "a", "##b", "##c", "d", "##"])]
    for ids in dec:
        for skip in (False, True):
            for clean in (True, False):
                out = tok.decode(ids, skip_special_tokens=skip, clean_up_tokenization_spaces=clean)
                rows.append((ints(ids), str(int(skip)), str(int(clean)), esc(out)))
    write("decode.tsv", ("ids", "skip", "clean", "text"), rows)
    print("wrote", OUT, "with transformers", transformers.__version__, "unicodedata", unicodedata.unidata_version)


if __name__ == "__main__":
    main()
