"""The calibration family: one-step file tasks that a small model solves sometimes.

The rest of the families are built for strong agents; SmolLM2-135M solves none of them, so GRPO on
them never sees a group whose rewards differ. These tasks are real ones (an input where the task
has one, an oracle that computes from it, a verifier that reads the final state), each done in one
shell command: write a line to a new file, append a line, count the lines holding a word, rename a
file, fix a misspelt one-line script. `task_complexity` is the difficulty knob and sets how much of
the command the instruction gives:

    short       the exact command, in a fenced block (the task is still to run it, in the
                harness's format, in the sandbox; a hidden answer, such as a count, stays hidden)
    moderate    the tool to use, not the command
    complex     nothing beyond the task itself
    intricate   nothing, and a twist a careless command gets wrong (two lines in order, a file
                without a final newline, decoy words, a name with a space, a second defect)

The family is opt-in (`opt_in`): only the `calibration` corpus kind (corpus.mix) draws it, so the
default mixes (config.yaml, configs/tmax15k.yaml) never contain it. Everything it needs inside the
sandbox is bash, coreutils, grep, sed and python3 (the grader).
"""

from __future__ import annotations

import random
import shlex

from termforge.generate.base import (DifficultyKnobs, FamilyAxes, TaskFamily, TaskSpec, bash_script, complexity_level,
                                     instruction_frame)
from termforge.generate.families.sources import py_source


KINDS = ("write_line", "append_line", "count_word", "rename_file", "fix_script")

FILE_STEMS = ("greeting", "notes", "status", "todo", "plan", "summary", "motd", "release", "inventory", "reminder")
ADJECTIVES = ("green", "quiet", "blue", "happy", "early", "silver", "brave", "calm", "lucky", "bright")
NOUNS = ("apple", "river", "garden", "morning", "planet", "rocket", "window", "forest", "engine", "harbor")
ITEMS = ("buy milk", "call the plumber", "water the plants", "renew the passport", "book the train",
         "pay the rent", "fix the bike", "clean the oven", "send the invoice", "back up the laptop")
# Count targets and words that contain them (decoys for a substring match at the intricate level).
TARGETS = {
    "apple": ("pineapple", "apples", "applesauce"),
    "cat": ("category", "cats", "scatter"),
    "log": ("blog", "logs", "catalog"),
    "port": ("report", "ports", "airport"),
    "net": ("network", "nets", "planet"),
    "run": ("runs", "brunch", "rerun"),
}
FILLER = ("the", "a", "blue", "red", "small", "big", "fast", "slow", "tree", "house", "car", "dog", "bird", "fish",
          "lamp", "desk", "road", "cloud", "stone", "paper", "music", "bread", "water", "light", "chair", "door")
RENAMES = (("draft", "final"), ("old", "current"), ("todo", "done"), ("temp", "saved"), ("notes", "archive"),
           ("input", "processed"))
TYPOS = ("ehco", "ecoh", "ech", "eho")
MESSAGES = ("backup done", "all systems go", "build finished", "hello from the server", "deploy complete",
            "tests passed")


# The hint seeds, one per kind, in the family's protocol: the whole task is one command in one reply
# (training runs these tasks with a two-turn cap and a short reply: the command, then the submit),
# so a method says which command does it and why, never "look first" or "check afterwards", which
# would spend the turn the task needs (the hint frame says the same: OneStepFileTask.episode_protocol).
METHOD_NOTES = {
    "write_line": ("Write the text with one echo command and output redirection (>), quoting the text so the "
                   "shell keeps it as one argument; printf with one %s per line writes several lines in order."),
    "append_line": ("Append with output redirection in append mode (>>), never >, which would empty the file; "
                    "when the file may lack a final newline, printf can write that newline before the new line "
                    "in the same command."),
    "count_word": ("Count matching lines, not matches, and redirect only the number into the output file in the "
                   "same command: grep -c counts lines, and -w keeps only whole words, so longer words that "
                   "merely contain it do not count."),
    "rename_file": ("Rename with one mv command, quoting a name that contains spaces so the shell passes it "
                    "as one argument."),
    "fix_script": ("Rewrite the whole line in one command rather than patching it: write a correct echo line "
                   "into the script with output redirection (>), which repairs every defect of the line at once."),
}


def _phrase(rng: random.Random) -> str:
    return f"{rng.choice(ADJECTIVES)} {rng.choice(NOUNS)}"


def _absent_test(*paths: str) -> str:
    return py_source("""
        import os

        __CONSTANTS__

        def test_outputs_not_there_yet():
            for path in OUTPUTS:
                assert not os.path.exists(path), path
        """, OUTPUTS=list(paths))


def _lines_test(name: str, path: str, lines: list[str]) -> str:
    return py_source(f"""
        import os

        __CONSTANTS__

        def {name}():
            assert os.path.isfile(PATH)
            with open(PATH, encoding="utf-8") as fh:
                got = [line.rstrip("\\n") for line in fh if line.strip()]
            assert got == LINES
        """, PATH=path, LINES=lines)


class OneStepFileTask(TaskFamily):
    """One shell command's worth of file work, with a difficulty knob that spans what a 135M
    instruct model solves sometimes (module docstring)."""

    # The twists of the intricate level (two lines, no final newline, decoys...) stay rules in each kind.
    knobs = DifficultyKnobs(instruction_gives=("the command", "the tool", "nothing", "nothing"))
    axes = FamilyAxes(name="one_step_file_task", domains=("file_operations",), verifier_kinds=("exact_text",),
                      fixture_kinds=("text_only",), skill_types=("bulk_transformation", "search_and_selection"),
                      skills=(), languages=("bash",), command_complexities=("bash_only",),
                      episode_protocol="one_command", opt_in=True,
                      summary="calibration (opt-in): one-step file tasks (write, append, count a word's lines, "
                              "rename, fix a one-line script); the level sets how much of the command the "
                              "instruction gives")
    method = (
        (METHOD_NOTES["write_line"], '(?m)^# Write a line'),
        (METHOD_NOTES["append_line"], '(?m)^# Append a line'),
        (METHOD_NOTES["count_word"], '(?m)^# Count the lines'),
        (METHOD_NOTES["rename_file"], '(?m)^# Rename a file'),
        (METHOD_NOTES["fix_script"], '(?m)^# Fix '),
    )


    def __init__(self, kinds: tuple[str, ...] = KINDS):
        unknown = sorted(set(kinds) - set(KINDS))
        if unknown or not kinds:
            raise ValueError(f"one_step_file_task: kinds must be a non-empty subset of {KINDS}, got {kinds!r}")
        self.kinds = tuple(kinds)  # every kind by default; a subset pins tests and benches to some

    def build(self, sig: dict, rng: random.Random) -> TaskSpec:
        level = complexity_level(sig)
        kind = rng.choice(self.kinds)
        spec = getattr(self, f"_{kind}")(sig, rng, level)
        # The kind and level describe the task the instruction states, so they are givens (the
        # leak checks treat every other truth key as part of the answer key).
        spec.truth = {**spec.truth, "given": {**spec.truth["given"], "kind": kind, "level": level}}
        return spec

    def _body(self, task: str, level: int, command: str, tool: str) -> str:
        """The task, then what the instruction gives beyond it at the level (instruction_gives)."""
        gives = self.knobs.at(level).instruction_gives
        guide = {"the command": f"Run exactly this one command:\n\n```bash\n{command}\n```",
                 "the tool": f"Hint: {tool}", "nothing": ""}[gives]
        return task + ("\n\n" + guide if guide else "")

    # -- the five kinds ------------------------------------------------------------------------
    def _write_line(self, sig: dict, rng: random.Random, level: int) -> TaskSpec:
        path = f"/app/{rng.choice(FILE_STEMS)}.txt"
        lines = [_phrase(rng)]
        if level == 3:
            while len(lines) < 2:
                extra = _phrase(rng)
                lines += [extra] if extra != lines[0] else []
            task = (f"Create the file `{path}` containing exactly two lines, in this order: `{lines[0]}` "
                    f"and then `{lines[1]}`.")
        else:
            task = f"Create the file `{path}` containing the single line `{lines[0]}`."
        command = f"echo {shlex.quote(lines[0])} > {path}"
        body = self._body(task, level, command, "one `echo` command with output redirection (`>`) does it.")
        return TaskSpec(
            instruction=instruction_frame(sig, "Write a line to a new file", body,
                                          [f"`{path}` with the requested line(s)."]),
            setup_sh=bash_script("true"),
            test_initial=_absent_test(path),
            test_final=_lines_test("test_file_holds_the_lines", path, lines),
            solve_sh=bash_script("printf '%s\\n' " + " ".join(shlex.quote(x) for x in lines) + f" > {path}"),
            truth={"given": {"path": path, "lines": lines}},
            verifier_kind="exact_text", fixture_kind="text_only", output_paths=[path])

    def _append_line(self, sig: dict, rng: random.Random, level: int) -> TaskSpec:
        stem = rng.choice(("todo", "shopping", "chores", "errands"))
        path = f"/app/{stem}.txt"
        original = rng.sample(ITEMS, rng.randint(3, 6))
        line = rng.choice([i for i in ITEMS if i not in original])
        # The intricate twist: the file has no final newline, so a plain `echo >>` glues the new
        # line onto the last one.
        text = "\n".join(original) + ("" if level == 3 else "\n")
        task = (f"`{path}` is a list with one item per line. Add the item `{line}` as a new last line, "
                "keeping every existing line as it is.")
        command = f"echo {shlex.quote(line)} >> {path}"
        body = self._body(task, level, command, "`echo` with `>>` appends a line to a file.")
        return TaskSpec(
            instruction=instruction_frame(sig, "Append a line", body, [f"`{path}` with the new last line."]),
            setup_sh=bash_script(f"cp /tmp/env/fixtures/{stem}.txt {path}"),
            test_initial=py_source("""
                __CONSTANTS__

                def test_list_present():
                    with open(PATH, encoding="utf-8") as fh:
                        assert len([ln for ln in fh if ln.strip()]) == COUNT
                """, PATH=path, COUNT=len(original)),
            test_final=_lines_test("test_item_appended", path, original + [line]),
            # From the input: add the missing final newline first, if any.
            solve_sh=bash_script(f"""
                if [ -s {path} ] && [ -n "$(tail -c1 {path})" ]; then printf '\\n' >> {path}; fi
                printf '%s\\n' {shlex.quote(line)} >> {path}
                """),
            truth={"given": {"path": path, "line": line}, "lines_before": len(original),
                   "final_newline": level != 3},
            verifier_kind="exact_text", fixture_kind="text_only", output_paths=[path],
            fixtures={f"{stem}.txt": text.encode()})

    def _count_word(self, sig: dict, rng: random.Random, level: int) -> TaskSpec:
        word = rng.choice(sorted(TARGETS))
        decoys = TARGETS[word] if level == 3 else ()
        filler = [w for w in FILLER if word not in w]
        # Two-digit counts: a truncated answer ("1" of "17") is then a wrong one.
        count = rng.randint(10, 24)
        total = count + rng.randint(5, 14)
        hits = set(rng.sample(range(total), count))
        lines = []
        for i in range(total):
            words = rng.sample(filler, rng.randint(2, 5))
            if i in hits:
                words.insert(rng.randrange(len(words) + 1), word)
                if level >= 2 and rng.random() < 0.3:
                    words.append(word)  # twice on one line: still one line
            elif decoys and rng.random() < 0.5:
                words.insert(rng.randrange(len(words) + 1), rng.choice(decoys))
            lines.append(" ".join(words))
        stem = rng.choice(("words", "lines", "log", "phrases"))
        src, out = f"/app/{stem}.txt", "/app/count.txt"
        task = (f"Count the lines of `{src}` that contain the word `{word}` (as a whole word) and write "
                f"that number, and nothing else, to `{out}`.")
        command = f"grep -c -w {word} {src} > {out}"
        body = self._body(task, level, command, "`grep -c -w WORD FILE` prints how many lines contain WORD.")
        return TaskSpec(
            instruction=instruction_frame(sig, "Count the lines with a word", body,
                                          [f"`{out}`: the number of matching lines."]),
            setup_sh=bash_script(f"cp /tmp/env/fixtures/{stem}.txt {src}"),
            test_initial=py_source("""
                import os

                __CONSTANTS__

                def test_input_present_and_no_answer_yet():
                    with open(SRC, encoding="utf-8") as fh:
                        assert len(fh.read().splitlines()) == TOTAL
                    assert not os.path.exists(OUT)
                """, SRC=src, OUT=out, TOTAL=total),
            test_final=py_source("""
                __CONSTANTS__

                def test_count_written():
                    with open(OUT, encoding="utf-8") as fh:
                        assert fh.read().strip() == str(COUNT)
                """, OUT=out, COUNT=count),
            solve_sh=bash_script(f"grep -c -w -- {word} {src} > {out} || true"),
            truth={"given": {"path": src, "word": word}, "count": count, "lines": total},
            verifier_kind="exact_text", fixture_kind="text_only", output_paths=[out],
            fixtures={f"{stem}.txt": ("\n".join(lines) + "\n").encode()})

    def _rename_file(self, sig: dict, rng: random.Random, level: int) -> TaskSpec:
        old_stem, new_stem = rng.choice(RENAMES)
        old = f"{old_stem} notes.txt" if level == 3 else f"{old_stem}.txt"  # a space needs quoting
        new = f"{new_stem}.txt"
        # Six lines or more: fewer data lines read as settings to the input-sensitivity check
        # (quality/perturb_inputs.MIN_RECORDS), which then has nothing to change.
        content = [_phrase(rng) for _ in range(rng.randint(6, 9))]
        task = f"In `/app`, rename the file `{old}` to `{new}`, keeping its content."
        command = f"mv /app/{old} /app/{new}"
        body = self._body(task, level, command, "`mv OLD NEW` renames a file.")
        return TaskSpec(
            instruction=instruction_frame(sig, "Rename a file", body, [f"`/app/{new}`, and no `{old}` any more."]),
            setup_sh=bash_script(f"cp /tmp/env/fixtures/source.txt {shlex.quote('/app/' + old)}"),
            test_initial=py_source("""
                import os

                __CONSTANTS__

                def test_old_name_present():
                    assert os.path.isfile(OLD) and not os.path.exists(NEW)
                """, OLD=f"/app/{old}", NEW=f"/app/{new}"),
            test_final=py_source("""
                import os

                __CONSTANTS__

                def test_old_name_gone():
                    assert not os.path.lexists(OLD)

                def test_new_name_holds_the_content():
                    assert os.path.isfile(NEW) and not os.path.islink(NEW)
                    with open(NEW, encoding="utf-8") as fh:
                        got = [line.rstrip("\\n") for line in fh if line.strip()]
                    assert got == LINES
                """, OLD=f"/app/{old}", NEW=f"/app/{new}", LINES=content),
            solve_sh=bash_script(f"mv -- {shlex.quote('/app/' + old)} /app/{new}"),
            truth={"given": {"old": old, "new": new}, "content_lines": len(content)},
            verifier_kind="exact_text", fixture_kind="text_only", output_paths=[f"/app/{new}"],
            fixtures={"source.txt": ("\n".join(content) + "\n").encode()})

    def _fix_script(self, sig: dict, rng: random.Random, level: int) -> TaskSpec:
        stem = rng.choice(("hello", "notify", "report", "banner"))
        path = f"/app/{stem}.sh"
        typo, message = rng.choice(TYPOS), rng.choice(MESSAGES)
        # The intricate twist: the closing quote is missing as well.
        script = f'{typo} "{message}' + ('"' if level < 3 else "") + "\n"
        task = (f"`bash {path}` should print `{message}`, but the one-line script fails. Fix `{path}` in "
                "place so that it prints exactly that line.")
        command = f"sed -i 's/{typo}/echo/' {path}"
        body = self._body(task, level, command, "the command name in the script is misspelt; `sed -i` can "
                                           "correct it in place.")
        return TaskSpec(
            instruction=instruction_frame(sig, f"Fix {stem}.sh", body, [f"`{path}`, fixed."]),
            setup_sh=bash_script(f"cp /tmp/env/fixtures/{stem}.sh {path}"),
            test_initial=py_source("""
                import os

                __CONSTANTS__

                def test_script_present():
                    assert os.path.isfile(SCRIPT)
                """, SCRIPT=path),
            test_final=py_source("""
                import subprocess

                __CONSTANTS__
                ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/tmp"}

                def test_script_prints_the_message():
                    res = subprocess.run(["/bin/bash", SCRIPT], cwd="/tmp", env=ENV, capture_output=True,
                                         timeout=30, stdin=subprocess.DEVNULL)
                    assert res.returncode == 0, res.stderr.decode(errors="replace")[-500:]
                    assert res.stdout.decode("utf-8", errors="replace").rstrip("\\n") == MESSAGE
                """, SCRIPT=path, MESSAGE=message),
            # From the input: the misspelt first word becomes echo, an unclosed quote is closed.
            solve_sh=bash_script(f"""
                sed -i -E -e '1s/^[a-z]+ /echo /' -e '1s/^(echo "[^"]*)$/\\1"/' {path}
                """),
            truth={"given": {"script": path, "message": message, **({"typo": typo} if level == 0 else {})},
                   "defects": ["misspelt command"] + (["unclosed quote"] if level == 3 else [])},
            verifier_kind="exact_text", fixture_kind="text_only", output_paths=[path],
            fixtures={f"{stem}.sh": script.encode()})


FAMILY = OneStepFileTask
