"""Prompts for the llm hint backend: the first request, and the repair request after a failed gate.

The hint writer is a host-side model: it sees the answer key and the oracle so that it knows what
must stay hidden. Its reply is policy-facing only after it passes the leak gate.
"""

from __future__ import annotations

import json
from typing import Any

# Large keys and oracles are cut to keep prompts within small context windows; the cut is
# deterministic so cached replies stay valid across runs.
MAX_TRUTH_CHARS = 4000
MAX_ORACLE_CHARS = 6000
MAX_METHOD_CHARS = 3000

SYSTEM_PROMPT = """\
You write hints for terminal tasks. An agent will solve the task in a Linux shell; your hint is \
what an experienced colleague would tell it before it starts: how to approach the problem, which \
tools and checks to use, which pitfalls to watch for.

The rule: teach how to discover, never give what must be discovered.
- Never state any value from the answer key: no answers, counts, names, passwords, tokens, \
numbers, expected output lines, which file or line holds the bug, or what the hidden cause is.
- Never paste commands, code or file paths from the reference solution that the instruction \
does not already give; describe the method in your own words instead.
- Never mention how the task is graded: no test files, test scripts, verifier paths or reward files.
- You may restate anything the instruction already says (its paths, formats, parameters).

Form: exactly one paragraph of plain text (no lists, headings or code blocks), written as \
imperatives addressed to the agent ("Inspect...", "Compare...", "Check..."), terminal-oriented, \
at most {max_words} words. Reply with the hint paragraph only.

Example task: "A service in /app/svc refuses to start. Find the broken setting in \
/app/svc/conf.d/ and fix it so `svc --check` prints OK." (answer key: the key is \
`pool.max_idle`, its value `-1` must become `8`; the oracle runs `sed -i 's/max_idle = -1/max_idle \
= 8/' /app/svc/conf.d/20-pool.ini`).

A good hint:
Run `svc --check` first and read its exact error, then list /app/svc/conf.d/ in load order and \
check which settings it reads; bisect by temporarily moving files aside (keep copies) until the \
error changes, compare each value in the suspect file against the documented range in the \
service's own docs, fix the smallest thing that restores a valid value, and rerun `svc --check` \
after every edit.

Leaking hints (never write these):
- "Set pool.max_idle to 8 in 20-pool.ini." (gives the answer and the file the agent must find)
- "Run sed -i 's/max_idle = -1/max_idle = 8/' /app/svc/conf.d/20-pool.ini." (pastes the oracle)
- "Make sure tests/test_final_state.py passes; it checks the pool section." (names the verifier)
- "The problem is a negative idle limit; use a positive one." (states the hidden cause)
"""

USER_TEMPLATE = """\
Write the hint for this task.

## Instruction (the agent sees exactly this)
{instruction}

## Parameters the instruction states (you may restate these)
{given}

## Answer key (never reveal any of it, not even in part)
{hidden}

## Reference solution script (never paste its commands, code or private paths)
{oracle}

## Method note (how an expert finds the answer; rephrase it, adapt it to the instruction)
{method}

Reply with one paragraph of imperative, method-level guidance, at most {max_words} words, and \
nothing else."""

REPAIR_TEMPLATE = """\
An earlier draft of this hint was rejected (it is not shown again). What was wrong with it:
{findings}

Write the hint from scratch. Keep the method, but remove every flagged item and anything that \
would let the agent skip the discovery: describe how to find such things instead of saying what \
they are. The same rule and form apply: one paragraph, imperative, at most {max_words} words, no \
answer values, no solution commands or private paths, no test or verifier files. Reply with the \
hint paragraph only."""


def _cut(text: str, limit: int) -> str:
    text = text.strip()
    if len(text) <= limit:
        return text
    return text[:limit].rstrip() + f"\n[... cut, {len(text) - limit} more characters]"


def initial_messages(
    instruction: str, truth: dict[str, Any], oracle: str, method: str, max_words: int
) -> list[dict[str, str]]:
    given = truth.get("given", {}) if isinstance(truth, dict) else {}
    hidden = {k: v for k, v in truth.items() if k != "given"} if isinstance(truth, dict) else truth
    user = USER_TEMPLATE.format(
        instruction=_cut(instruction, 8000),
        given=_cut(json.dumps(given, indent=1, sort_keys=True, ensure_ascii=False), MAX_TRUTH_CHARS) or "{}",
        hidden=_cut(json.dumps(hidden, indent=1, sort_keys=True, ensure_ascii=False), MAX_TRUTH_CHARS),
        oracle=_cut(oracle, MAX_ORACLE_CHARS) or "(none)",
        method=_cut(method, MAX_METHOD_CHARS) or "(none)",
        max_words=max_words,
    )
    return [
        {"role": "system", "content": SYSTEM_PROMPT.format(max_words=max_words)},
        {"role": "user", "content": user},
    ]


def repair_message(findings: list[dict[str, str]], max_words: int) -> dict[str, str]:
    """The kinds of problem the gate found, never the offending text: quoting a leak back to the
    writer invites it to re-encode the same value. Each kind is named once, with how it was
    disguised where that is known."""
    lines = []
    seen: set[str] = set()
    for f in findings:
        line = f"- {KIND_HELP.get(f['kind'], f['kind'])}"
        how = _disguise(f.get("detail", ""))
        if how:
            line += f" (it was {how}; any encoding, spelling or arithmetic of it counts the same)"
        if line not in seen:
            seen.add(line)
            lines.append(line)
    return {"role": "user", "content": REPAIR_TEMPLATE.format(findings="\n".join(lines), max_words=max_words)}


# What each finding kind means, in words a writer can act on without being told the secret.
KIND_HELP = {
    "not_one_paragraph": "the hint is not one plain paragraph",
    "too_long": "the hint is too long",
    "literal_answer": "the hint states a value from the answer key",
    "disguised_answer": "the hint carries a value from the answer key in disguise",
    "bug_name": "the hint names a planted bug",
    "bug_pointer": "the hint points at where a planted bug is (its line, its function, the line that holds it)",
    "test_assertion": "the hint restates a value the verifier checks",
    "truth_ngram": "the hint copies a run of words from the answer key",
    "oracle_ngram": "the hint copies a run of words from the reference solution",
    "test_reference": "the hint points at the verifier's files",
    "oracle_path": "the hint names a path only the reference solution uses",
    "off_task": "the hint is not about this task (it shares no files, paths or terms with it, or names or quotes "
                "others)",
    "judge_leak": "a reviewer found that the hint reveals something the agent must discover",
    "probe_leak": "a reader given only the instruction and the hint could produce the answer",
}


def _disguise(detail: str) -> str:
    from termforge.quality.leaks import HOW_WORDS

    for how in HOW_WORDS.values():
        if detail.endswith(", " + how) and how != HOW_WORDS["literal"]:
            return how
    return ""
