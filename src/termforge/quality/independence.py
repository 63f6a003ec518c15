"""Is a second solution a second opinion, or the oracle again?

A second solution confirms a task only if it could have gone wrong differently: one that repeats
the oracle's text, or its structure under other names, repeats its blind spots too (an input it
never reads, a case it never handles), and its agreement proves nothing. The llm backend's solver
never sees the oracle (generate/llm_prompts.second_solution_prompt takes only the instruction and
the listing of /app); this check refuses, after the fact, a script that came out the same anyway.

Two readings, each blind to what a copy would change:
- normalised tokens: comments and layout dropped, string, number and path literals reduced to
  their kind, every name the script binds (a variable, a function, an argument) reduced to one
  symbol, so renaming changes nothing; the commands, functions and attributes it calls are its
  method and keep their spelling;
- the shape of the embedded Python (heredocs and `python3 -c` bodies): the sequence of syntax node
  kinds, names and literals left out.
The similarity is the larger of the two (difflib's ratio: matched tokens over all tokens). Two
scripts at or above THRESHOLD are the same solution.
"""

from __future__ import annotations

import ast
import difflib
import re

THRESHOLD = 0.8
# Scripts this short have too few ways to be written for likeness to mean copying (a one-line
# pipeline): below it, only the tokens' reading counts, and it must match exactly.
MIN_TOKENS = 12
_HEREDOC = re.compile(r"<<-?\s*(['\"]?)(\w+)\1[^\n]*\n(.*?)\n\s*\2\s*$", re.S | re.M)
_PY_C = re.compile(r"python3?\s+-c\s+(['\"])(.*?)(?<!\\)\1", re.S)
_TOKEN = re.compile(r"""
    (?P<str>"(?:\\.|[^"\\])*"|'[^']*')
  | (?P<path>(?:[\w.*-]*/)+[\w.*-]*)
  | (?P<num>\d+(?:\.\d+)?)
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>\S)
""", re.X)
_COMMENT = re.compile(r"(?m)(?:^|(?<=\s))#(?!!).*$")


def _python_bodies(script: str) -> list[str]:
    bodies = [m.group(3) for m in _HEREDOC.finditer(script)]
    bodies += [m.group(2) for m in _PY_C.finditer(script)]
    out = []
    for body in bodies:
        try:
            ast.parse(body)
        except (SyntaxError, ValueError):
            continue  # not Python (an awk program, a data heredoc)
        out.append(body)
    return out


def bound_names(script: str) -> set[str]:
    """The names the script's author chose: shell variables it assigns, loops over or reads, and
    what its embedded Python binds (variables, functions, classes, arguments, loop targets)."""
    names = set(re.findall(r"(?m)(?:^|[;\s(])([A-Za-z_]\w*)\+?=", script))
    names |= set(re.findall(r"\b(?:for|read(?:\s+-\w+)*)\s+([A-Za-z_]\w*)", script))
    for body in _python_bodies(script):
        for node in ast.walk(ast.parse(body)):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
            elif isinstance(node, ast.alias) and node.asname:
                names.add(node.asname)
    return names


def normalised_tokens(script: str) -> list[str]:
    """The script's tokens with comments, layout, literals' values and the spellings of the names
    its author chose gone; commands, functions and attributes it calls keep theirs (the method)."""
    bound = bound_names(script)
    out = []
    for m in _TOKEN.finditer(_COMMENT.sub("", script)):
        kind = m.lastgroup
        tok = m.group()
        if kind == "str":
            out.append("S")
        elif kind == "num":
            out.append("N")
        elif kind == "path":
            out.append("P")
        elif kind == "name":
            out.append("ID" if tok in bound else tok)
        else:
            out.append(tok)
    return out


def python_shape(script: str) -> list[str]:
    """The kinds of the syntax nodes of the script's embedded Python, in source order."""
    shape: list[str] = []
    for body in _python_bodies(script):
        tree = ast.parse(body)
        for node in ast.walk(tree):
            if isinstance(node, (ast.expr_context, ast.Load, ast.Store, ast.Del)):
                continue
            shape.append(type(node).__name__)
    return shape


def _ratio(a: list[str], b: list[str]) -> float:
    if not a or not b:
        return 0.0
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def similarity(oracle: str, other: str) -> float:
    """How much of `other` is `oracle` again, in [0, 1] (module doc)."""
    ta, tb = normalised_tokens(oracle), normalised_tokens(other)
    if min(len(ta), len(tb)) < MIN_TOKENS:
        return 1.0 if ta == tb else 0.0
    return max(_ratio(ta, tb), _ratio(python_shape(oracle), python_shape(other)))


def repeats_oracle(oracle: str, other: str, threshold: float = THRESHOLD) -> str | None:
    """Why `other` is no second opinion on `oracle`, or None when it is one."""
    score = similarity(oracle, other)
    if score >= threshold:
        return (f"the second solution is the oracle's text or structure again (similarity {score:.2f} >= "
                f"{threshold}): a copy repeats its blind spots and confirms nothing")
    return None


__all__ = ["THRESHOLD", "similarity", "repeats_oracle", "normalised_tokens", "python_shape", "bound_names"]
