#!/bin/sh
# examples/peers/count-lines.sh — lines of each C example against its Python peer (issue 15).
#
# One rule for both languages: count the non-blank lines that are not comment-only.
#   C:      a line whose text, once // and /* ... */ comments are removed (string and
#           character literals respected), is blank does not count; so the lines of a
#           block comment and lines holding only a comment do not, and a line of code
#           with a comment after it does.
#   Python: a line that holds only a # comment, or belongs to a docstring (the string
#           that opens a module, class or function), does not count.
# Everything else counts: #include / import lines, braces, declarations, error checks.
# Both sides are written at most 120 columns wide (the repository's C width); the Python
# wraps long calls and imports in the compact style (isort's grid, aligned continuation
# lines), which never makes it longer than black would.
#
#   examples/peers/count-lines.sh            # from anywhere; prints the table
#
# Exit status: 0 when every pair is within its target ratio, 1 otherwise.
# Needs python3 (standard library only).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
exec python3 - "$here" <<'PY'
import ast, io, os, sys, tokenize

here = sys.argv[1]
ex = os.path.dirname(here)
PAIRS = [  # (what, C file, Python file, target ratio)
    ("regression", "07_regression.c", "regression.py", 1.5),
    ("SST-2 loop", "08_sst2_loop.c", "sst2_loop.py", 1.5),
    ("custom function", "06_custom_function.c", "custom_function.py", 2.0),
]

def c_lines(text):
    out, i, n, state = [], 0, len(text), "code"
    line = []
    while i < n:
        ch, nxt = text[i], text[i + 1] if i + 1 < n else ""
        if ch == "\n":
            if state == "line":
                state = "code"
            out.append("".join(line)); line = []; i += 1; continue
        if state == "code":
            if ch == "/" and nxt == "/": state = "line"; i += 2; continue
            if ch == "/" and nxt == "*": state = "block"; i += 2; continue
            if ch in "\"'": state = ch
            line.append(ch)
        elif state == "block":
            if ch == "*" and nxt == "/": state = "code"; i += 2; continue
        elif state in "\"'":
            line.append(ch)
            if ch == "\\": line.append(nxt); i += 2; continue
            if ch == state: state = "code"
        i += 1
    out.append("".join(line))
    return sum(1 for l in out if l.strip())

def py_lines(text):
    skip = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                skip.update(range(first.lineno, first.end_lineno + 1))
    code = set()
    ignore = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type not in ignore:
            code.update(range(tok.start[0], tok.end[0] + 1))
    return len(code - skip)

rows, worst = [], 0
for what, c, py, target in PAIRS:
    cp, pp = os.path.join(ex, c), os.path.join(here, py)
    missing = [p for p in (cp, pp) if not os.path.exists(p)]
    if missing:
        rows.append((what, "missing: " + missing[0], "", "", "", "", "", ""))
        worst = 1
        continue
    nc = c_lines(open(cp, encoding="utf-8").read())
    npy = py_lines(open(pp, encoding="utf-8").read())
    ratio = nc / npy
    worst |= ratio > target
    rows.append((what, "examples/" + c, str(nc), "examples/peers/" + py, str(npy), "%.2fx" % ratio,
                 "<= %.1fx" % target, "ok" if ratio <= target else "OVER"))
head = ("program", "C file", "C", "Python file", "Python", "ratio", "target", "")
w = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
right = {2, 4, 5}
for r in [head] + rows:
    print("  ".join(v.rjust(w[i]) if i in right else v.ljust(w[i]) for i, v in enumerate(r)).rstrip())
sys.exit(worst)
PY
