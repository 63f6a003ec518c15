"""An upload-path guard, written by the agent, graded on a hidden adversarial corpus of paths."""

from __future__ import annotations

import random
import string

from termforge.errors import TermforgeError
from termforge.generate.base import (DifficultyKnobs, FamilyAxes, TaskFamily, TaskSpec, bash_script, complexity_level,
                                      instruction_frame, pytest_module)
from termforge.generate.families.package_files import family_template


EXTENSION_POOL = ("png", "jpg", "jpeg", "gif", "pdf", "txt", "csv", "webp", "md", "json")
BAD_EXTENSIONS = ("php", "exe", "sh", "html", "svg", "js", "phtml", "jsp", "py", "bat")
DIR_POOL = ("img", "docs", "2024", "user_42", "a-b", "reports", "tmp", "x", "q3", "team.alpha",
            "archive", "v1.2", "in_box", "public")
NAME_CHARS = string.ascii_letters + string.digits + "_-"

# The guard is written once: the oracle installs this program and the generator runs the very
# same text to label the hidden corpus, so key and solution cannot drift apart.
GUARD_TEMPLATE = family_template(__name__, "guard.py.txt")


def _pct(ch: str, rng: random.Random) -> str:
    code = f"{ord(ch):02x}"
    return "%" + (code.upper() if rng.random() < 0.5 else code)


class _PathMaker:
    """Tricky upload paths: each method is one way real traversal filters get fooled (or fool)."""

    def __init__(self, rng: random.Random, allowed: list[str], max_dirs: int):
        self.rng, self.allowed, self.max_dirs = rng, allowed, max_dirs

    def name(self) -> str:
        return "".join(self.rng.choice(NAME_CHARS) for _ in range(self.rng.randint(1, 8)))

    def ext(self) -> str:
        ext = self.rng.choice(self.allowed)
        return ext.upper() if self.rng.random() < 0.2 else ext

    def file(self) -> str:
        return f"{self.name()}.{self.ext()}"

    def dirs(self, n: int) -> list[str]:
        return [self.rng.choice(DIR_POOL) for _ in range(n)]

    def plain(self) -> str:
        return "/".join(self.dirs(self.rng.randint(0, self.max_dirs)) + [self.file()])

    def too_deep(self) -> str:
        return "/".join(self.dirs(self.max_dirs + self.rng.randint(1, 2)) + [self.file()])

    def up_then_down(self) -> str:
        d = self.dirs(self.rng.randint(1, self.max_dirs))
        cut = self.rng.randint(0, len(d) - 1)
        return "/".join(d[:cut + 1] + [".."] + d[cut + 1:] + [self.file()])

    def escape(self) -> str:
        d = self.dirs(self.rng.randint(0, 2))
        return "/".join(d + [".."] * (len(d) + 1) + self.dirs(self.rng.randint(0, 1)) + [self.file()])

    def encoded_parent(self) -> str:
        parent = self.rng.choice(("%2e%2e/", "%2E%2E%2F", ".%2e/", "%2e./", "..%2f", "..%5c",
                                  "%252e%252e%252f", "%25252e%25252e/", "..%255c"))
        d = self.dirs(self.rng.randint(0, 1))
        return "/".join(d) + ("/" if d else "") + parent * self.rng.randint(1, 3) + self.file()

    def backslash(self) -> str:
        d = self.dirs(self.rng.randint(1, 2))
        sep = self.rng.choice(("\\", "%5c", "%5C", "%255c"))
        return sep.join(d + [self.file()])

    def backslash_parent(self) -> str:
        return "..\\" + self.file()

    def absolute(self) -> str:
        lead = self.rng.choice(("/", "//", "%2f", "%2F", "%252f", "\\"))
        return lead + "/".join(self.dirs(self.rng.randint(0, 2)) + [self.file()])

    def control(self) -> str:
        path = self.plain()
        bad = self.rng.choice(("%00", "%0a", "%0d", "%09", "%1b", "%7f", "%2500", "%250a"))
        cut = self.rng.randint(0, len(path))
        return path[:cut] + bad + path[cut:]

    def non_ascii(self) -> str:
        junk = self.rng.choice(("%c3%a9", "%e2%80%ae", "%ff", "%c0%ae%c0%ae", "%ef%bc%8f"))
        return "/".join(self.dirs(self.rng.randint(0, 1)) + [self.name() + junk + self.name() + "." + self.ext()])

    def hidden(self) -> str:
        return self.rng.choice((
            f".git/{self.file()}", f"{self.rng.choice(DIR_POOL)}/.{self.file()}", f".{self.ext()}",
            f"...{self.rng.choice(('/', ''))}{self.file()}", f"%2e{self.file()}",
        ))

    def bad_extension(self) -> str:
        bad = self.rng.choice(BAD_EXTENSIONS)
        stem = self.name()
        return self.rng.choice((
            f"{stem}.{self.ext()}.{bad}", f"{stem}.{bad}", f"{stem}.{self.ext()}.", f"{stem}",
            f"{stem}.{self.ext()}%20", f"{stem}.{self.ext()[:-1]}", f"{stem}.{self.ext()}x",
            f"{stem}.{self.ext()}%2500.{bad}", f"{stem}.{self.ext()};.{bad}",
        ))

    def good_double_extension(self) -> str:
        return f"{self.name()}.{self.rng.choice(BAD_EXTENSIONS)}.{self.ext()}"

    def odd_characters(self) -> str:
        ch = self.rng.choice((" ", ":", ";", "~", "*", "'", "|", "$", "?", "%20", "%3a", "+", "&"))
        name = self.name()
        cut = self.rng.randint(0, len(name))
        return "/".join(self.dirs(self.rng.randint(0, 1)) + [name[:cut] + ch + name[cut:] + "." + self.ext()])

    def edge_spaces(self) -> str:
        return self.rng.choice((" ", "  ")) + self.plain() if self.rng.random() < 0.5 else self.plain() + " "

    def dot_segments(self) -> str:
        d = self.dirs(self.rng.randint(0, max(0, self.max_dirs - 1)))
        pieces = []
        for seg in d + [self.file()]:
            pieces += [seg] + ([self.rng.choice((".", ""))] if self.rng.random() < 0.5 else [])
        lead = self.rng.choice(("./", "", ".//"))
        trail = self.rng.choice(("", "/", "/."))
        return lead + "/".join(pieces) + trail

    def encoded_plain(self) -> str:
        path = self.plain()
        return "".join(_pct(ch, self.rng) if ch.isalnum() and self.rng.random() < 0.3 else ch for ch in path)

    def encoded_slash(self) -> str:
        return self.rng.choice(("%2f", "%2F", "%252f")).join(self.dirs(1) + [self.file()])

    def malformed_percent(self) -> str:
        return self.rng.choice((
            f"100%{self.file()}", f"%zz{self.file()}", f"%4{self.file()}", f"{self.name()}%.{self.ext()}",
            f"%%34%31{self.file()}", f"%25%34%31{self.file()}", f"{self.name()}%2.{self.ext()}",
        ))

    def degenerate(self) -> str:
        return self.rng.choice(("", ".", "./", "/", "..", "%2e", "//", "%00", " "))

    KINDS = ("plain", "plain", "plain", "too_deep", "up_then_down", "up_then_down", "escape",
             "encoded_parent", "backslash", "backslash_parent", "absolute", "control", "non_ascii", "hidden",
             "bad_extension", "good_double_extension", "odd_characters", "edge_spaces", "dot_segments",
             "dot_segments", "encoded_plain", "encoded_slash", "malformed_percent", "degenerate")

    def any(self) -> str:
        return getattr(self, self.rng.choice(self.KINDS))()


def load_guard(source: str):
    namespace: dict = {"__name__": "termforge_pathguard"}
    exec(compile(source, "<pathguard>", "exec"), namespace)
    return namespace["judge"]


class UploadPathGuard(TaskFamily):
    """Write an upload-path guard to a precise policy; graded on a hidden corpus of bypass attempts."""

    knobs = DifficultyKnobs(corpus_size=(40, 60, 90, 120))
    axes = FamilyAxes(name="upload_path_guard", domains=("security",), verifier_kinds=("adversarial_corpus",),
                      fixture_kinds=("text_only",), skill_types=("input_hardening",),
                      skills=("detect path traversal attempts in request paths",
                              "reject injection payloads with an allow-list validator"), languages=("python",),
                      command_complexities=("bash_code",),
                      summary="implement a path-traversal guard for upload paths, graded on a hidden adversarial "
                              "corpus")
    method = (
        ('Implement the rules literally and in the stated order; the corpus is built from the classic bypasses '
         'of ad-hoc filters. Decode in a loop until a fixpoint (double- and triple-encoded dots and slashes: %2e, %2f, '
         'and %25 for the percent sign itself), '
         "using a regex over exactly two hex digits rather than urllib's unquote semantics, and only then look "
         'for control or non-ASCII characters. Read lines by splitting on newline only: do not strip spaces or '
         'use splitlines(), which also splits on other control characters. Check segment characters before '
         'resolving `..` removes them, treat `...` and names starting with a dot as hidden, take the extension '
         'after the last dot only, and count directories after normalization. Test the program against '
         '/app/samples.tsv and against your own adversarial cases for each rule.', None),
    )


    @staticmethod
    def _corpus(maker: _PathMaker, judge, size: int, instruction: str) -> tuple[list[str], list[str]]:
        """Visible samples, then a hidden corpus disjoint from them and from the instruction's text.
        Label quotas keep it balanced, so a constant answer (or deny-everything) scores poorly."""
        samples: list[str] = []
        for kind in ("plain", "escape", "encoded_parent", "bad_extension", "hidden", "dot_segments",
                     "control", "odd_characters", "good_double_extension", "absolute"):
            path = getattr(maker, kind)()
            if path not in samples:
                samples.append(path)
        quota = {True: int(0.55 * size), False: int(0.65 * size)}
        corpus: list[str] = []
        seen = set(samples)
        attempts = 0
        while len(corpus) < size:
            attempts += 1
            if attempts > 100 * size:
                raise TermforgeError(f"upload_path_guard: could not draw a balanced corpus of {size} paths")
            path = maker.any()
            verdict = judge(path)
            allowed = verdict.startswith("ALLOW")
            visible = any(len(v) >= 6 and v in instruction for v in (path, verdict))
            if path in seen or quota[allowed] == 0 or visible:
                continue
            seen.add(path)
            quota[allowed] -= 1
            corpus.append(path)
        return samples, corpus

    def build(self, sig: dict, rng: random.Random) -> TaskSpec:
        knobs = self.knobs.at(complexity_level(sig))
        allowed = sorted(rng.sample(EXTENSION_POOL, rng.randint(3, 5)))
        backslash = rng.random() < 0.5
        policy = rng.choice(("strict", "contained"))
        max_dirs = rng.randint(2, 4)
        guard_source = GUARD_TEMPLATE.format(extensions=allowed, backslash=backslash, policy=policy,
                                             max_dirs=max_dirs)
        judge = load_guard(guard_source)
        maker = _PathMaker(rng, allowed, max_dirs)

        prog = "/app/pathguard.py"
        ext_list = ", ".join(f"`{e}`" for e in allowed)
        parent_rule = (
            "any `..` segment denies the path, wherever it appears"
            if policy == "strict" else
            "a `..` segment removes the last kept segment; if there is none to remove "
            "(the path would climb above the upload root), deny"
        )
        backslash_rule = (
            "then replace every backslash `\\` by `/` (Windows clients send both separators);"
            if backslash else
            "a backslash is an ordinary (and therefore forbidden) character, not a separator;"
        )
        instruction = instruction_frame(
            sig, "Harden the upload path guard",
            f"""
            Our upload service stores files under an upload root using a client-supplied relative
            path, and people keep getting traversal payloads past the current filter. Write a new
            guard, `{prog}`, run as `python3 {prog} < paths.txt`. It reads raw paths, one per line
            (strip only the trailing newline `\\n`; every other character, spaces included, is part
            of the path), and writes exactly one line per input line, in order: `DENY`, or
            `ALLOW <normalized path>`. Apply these rules in this order:

            1. Percent-decode repeatedly: in each round replace every `%XX` (two hex digits, either
               case), scanning left to right without overlap, by the single character with that
               code; stop when a round changes nothing. A `%` not followed by two hex digits stays as is.
            2. If the decoded text contains any character outside printable ASCII (codes 32-126), deny.
            3. Separators: {backslash_rule}
            4. If the text starts with `/`, deny (absolute path).
            5. Split on `/`. Skip empty segments and `.` segments. For `..`: {parent_rule}.
               Every other segment must not start with `.` and must consist only of ASCII letters,
               digits, `.`, `_` and `-`; otherwise deny (this applies to segments a later `..` removes, too).
            6. If no segment is left, deny. The last segment is the file name: it must contain a
               `.` with at least one character before its last `.`, and the extension after the
               last `.`, compared case-insensitively, must be one of {ext_list}; otherwise deny.
            7. At most {max_dirs} directory segments may precede the file name; otherwise deny.
            8. Otherwise print `ALLOW ` followed by the kept segments joined with `/`.

            `/app/samples.tsv` holds a few raw paths with the expected output line (tab-separated).
            The guard is graded on a larger hidden set of tricky paths and must get every one of them
            right. Use only the Python standard library.
            """,
            [f"`{prog}`: the guard described above (stdin to stdout)."],
        )
        size = knobs.corpus_size
        samples, corpus = self._corpus(maker, judge, size, instruction)
        expected = [judge(p) for p in corpus]
        sample_text = "".join(f"{p}\t{judge(p)}\n" for p in samples)

        test_initial = pytest_module(f'''
            import os


            def test_samples_present():
                with open("/app/samples.tsv") as fh:
                    rows = [line.rstrip("\\n").split("\\t") for line in fh]
                assert len(rows) == {len(samples)}
                assert all(len(r) == 2 for r in rows)


            def test_guard_not_written_yet():
                assert not os.path.exists("{prog}")
        ''')
        test_final = pytest_module(f'''
            import subprocess

            CORPUS = {corpus!r}
            EXPECTED = {expected!r}


            def test_guard_classifies_hidden_corpus():
                feed = "".join(p + "\\n" for p in CORPUS)
                res = subprocess.run(["/usr/bin/python3", "{prog}"], input=feed.encode(),
                                     capture_output=True, timeout=60)
                assert res.returncode == 0, res.stderr.decode(errors="replace")[-2000:]
                got = res.stdout.decode(errors="replace").split("\\n")
                assert got[-1] == "", "output must end with a newline"
                got = got[:-1]
                assert len(got) == len(CORPUS), f"{{len(got)}} output lines for {{len(CORPUS)}} paths"
                wrong = [(p, e, g) for p, e, g in zip(CORPUS, EXPECTED, got) if e != g]
                assert not wrong, f"{{len(wrong)}} of {{len(CORPUS)}} misjudged, e.g. {{wrong[:5]}}"
        ''')
        solve = bash_script(f"""
            cat > {prog} <<'PY'
            {{guard}}PY
        """).replace("{guard}", guard_source)
        return TaskSpec(
            instruction=instruction,
            setup_sh=bash_script("cp /tmp/env/fixtures/samples.tsv /app/samples.tsv"),
            test_initial=test_initial,
            test_final=test_final,
            solve_sh=solve,
            truth={
                "given": {"allowed_extensions": allowed, "backslash_is_separator": backslash,
                          "parent_policy": policy, "max_directories": max_dirs},
                "corpus": [[p, e] for p, e in zip(corpus, expected)],
            },
            verifier_kind="adversarial_corpus",
            fixture_kind="text_only",
            fixtures={"samples.tsv": sample_text.encode()},
            output_paths=[prog],
        )


FAMILY = UploadPathGuard
