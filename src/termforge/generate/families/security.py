"""security families: a stripped binary that hides a passphrase, an upload-path guard graded on
a hidden adversarial corpus, and brute-force logins found in rotated sshd auth logs."""

from __future__ import annotations

import gzip
import hashlib
import random
import shutil
import string
import subprocess
import tempfile
from datetime import datetime, timedelta
from pathlib import Path

from termforge.errors import TermforgeError
from termforge.generate.base import (TaskFamily, TaskSpec, bash_script, complexity_level, instruction_frame,
                                     pytest_module)
from termforge.generate.families.scientific_computing import lines_final_test, py_source, python_oracle

# Fixed flags and a fixed source name make gcc's output depend on the source text alone (checked:
# the same bytes from different working directories); -frandom-seed pins the one random input gcc has.
GCC_FLAGS = ("-O1", "-s", "-std=c99", "-frandom-seed=termforge")
GCC_ENV = {"PATH": "/usr/bin:/bin", "LC_ALL": "C"}


def compile_c(source: str, binary_name: str, family: str) -> bytes:
    """Compile one C file with fixed flags and return the stripped executable's bytes."""
    gcc = shutil.which("gcc", path=GCC_ENV["PATH"])
    if gcc is None:
        raise TermforgeError(f"family {family}: gcc is needed at generation time to build the "
                             "stripped_binary fixture (apt-get install gcc)")
    with tempfile.TemporaryDirectory(prefix="tf-cc-") as tmp:
        Path(tmp, "main.c").write_text(source)
        res = subprocess.run([gcc, *GCC_FLAGS, "-o", binary_name, "main.c"], cwd=tmp, env=GCC_ENV,
                             capture_output=True, text=True, timeout=120)
        if res.returncode != 0:
            raise TermforgeError(f"family {family}: gcc failed on the generated source: {res.stderr[-2000:]}")
        return Path(tmp, binary_name).read_bytes()


# --------------------------------------------------------------------------------------------------
# stripped_binary: recover a passphrase from a vendor binary


KEY_LENGTH = {"short": 6, "moderate": 8, "complex": 10, "intricate": 12}
DECOY_COUNT = {"short": 1, "moderate": 2, "complex": 3, "intricate": 4}
BINARY_NAMES = ("gatekeeper", "vaultctl", "licensed", "unlockd", "keyguard", "sealtool")
TOKEN_PREFIXES = ("UNLOCK", "GRANT", "TOKEN", "LEASE", "OPEN")
DECOY_WORDS = ("admin", "letmein", "vendor", "master", "default", "service", "backup", "support",
               "factory", "override")
PASS_ALPHABET = string.ascii_lowercase + string.digits

C_TEMPLATE = """\
#include <stdio.h>
#include <string.h>

static const unsigned char sealed[] = {{ {sealed} }};
static const char *const revoked[] = {{ {revoked} }};

static unsigned int derive(const char *s)
{{
    unsigned int h = {basis}u;
    for (; *s; s++) {{
        h ^= (unsigned char)*s;
        h *= 16777619u;
        h ^= h >> {shift};
    }}
    return h;
}}

int main(int argc, char **argv)
{{
    size_t n, i;
    if (argc != 2) {{
        fprintf(stderr, "usage: {name} <passphrase>\\n");
        return 2;
    }}
    n = strlen(argv[1]);
    for (i = 0; i < sizeof revoked / sizeof revoked[0]; i++) {{
        if (strcmp(argv[1], revoked[i]) == 0) {{
            puts("DENIED: passphrase revoked");
            return 3;
        }}
    }}
    for (i = 0; i < n && i < sizeof sealed; i++) {{
        if ((unsigned char)argv[1][i] != (unsigned char)(sealed[i] ^ (unsigned char)({mask}u + i * {step}u)))
            break;
    }}
    if (i == sizeof sealed && n == sizeof sealed) {{
        printf("{prefix}-%08x\\n", derive(argv[1]));
        return 0;
    }}
    puts("DENIED");
    return {status_base} + (int)i;
}}
"""


def derive_token(passphrase: str, basis: int, shift: int) -> int:
    """The binary's token function, mirrored to know the answer key without running the binary."""
    h = basis
    for byte in passphrase.encode():
        h ^= byte
        h = (h * 16777619) & 0xFFFFFFFF
        h ^= h >> shift
    return h


class BinaryPassphraseRecovery(TaskFamily):
    """A stripped vendor binary guards an unlock token behind a lost passphrase; recover both."""

    name = "binary_passphrase_recovery"
    method = (
        ('Treat the binary as a black box first and as a disassembly second. `strings` shows candidate '
         'passphrases, but they belong to a revoked list and must be tried before being believed. Run the '
         'binary on a few wrong guesses and record every observable, including the exit status (`echo $?`), '
         'not just stdout: compare the status for guesses that differ only in their first character. If the '
         'status moves with how much of the guess is right, grow the passphrase one character at a time over '
         'the stated alphabet with a small script. Alternatively, objdump -d shows the comparison loop, an XOR '
         'against a per-position key stream over a byte array in .rodata, which can be decoded by hand. '
         'Finally run the binary with the recovered passphrase and copy its output line verbatim.', None),
    )
    domains = ("security",)
    verifier_kinds = ("exact_text",)
    fixture_kinds = ("stripped_binary",)
    summary = "recover a lost passphrase and the unlock token from a stripped ELF binary"
    skill_types = ("artifact_triage",)
    skills = ("extract printable strings from an unknown binary", "read ELF headers, sections and imported symbols")
    languages = ("bash", "python")
    command_complexities = ("bash_only", "bash_code")

    def build(self, sig: dict, rng: random.Random) -> TaskSpec:
        complexity = sig.get("task_complexity", "moderate")
        key_len = KEY_LENGTH.get(complexity, 8)
        binary = rng.choice(BINARY_NAMES)
        prefix = rng.choice(TOKEN_PREFIXES)
        passphrase = "".join(rng.choice(PASS_ALPHABET) for _ in range(key_len))
        # Decoys carry a non-alphanumeric character, so they can never be the real passphrase and
        # they are what `strings` shows first: a lead that has to be tested, not trusted.
        decoys = []
        for word in rng.sample(DECOY_WORDS, DECOY_COUNT.get(complexity, 2)):
            decoys.append(f"{word}{rng.choice('-_')}{rng.randint(10, 9999)}")
        mask, step = rng.randrange(256), rng.randrange(1, 256, 2)
        sealed = [ord(c) ^ ((mask + i * step) & 0xFF) for i, c in enumerate(passphrase)]
        basis, shift = rng.randrange(1 << 32), rng.randint(7, 17)
        status_base = rng.choice((40, 64, 80, 100))
        source = C_TEMPLATE.format(
            sealed=", ".join(f"0x{b:02x}" for b in sealed),
            revoked=", ".join(f'"{d}"' for d in decoys),
            basis=basis, shift=shift, name=binary, mask=mask, step=step, prefix=prefix,
            status_base=status_base,
        )
        elf = compile_c(source, binary, self.name)
        if passphrase.encode() in elf:
            raise TermforgeError(f"family {self.name}: the compiled binary exposes the passphrase in clear")
        token = f"{prefix}-{derive_token(passphrase, basis, shift):08x}"
        bin_path = f"/app/bin/{binary}"
        out = "/app/recovered.txt"
        elf_sha = hashlib.sha256(elf).hexdigest()

        instruction = instruction_frame(
            sig, "Recover a lost unlock passphrase",
            f"""
            A vendor shipped us `{bin_path}`, a stripped Linux executable, and nobody kept its
            passphrase. It takes the passphrase as its only argument and, when the passphrase is
            right, prints a one-line unlock token on stdout and exits 0. We know the passphrase
            consists only of lowercase ASCII letters and digits. The source code is not available;
            you may run and inspect the binary as much as you like, but do not modify it.
            """,
            [f"`{out}`: exactly two lines, `passphrase=<the passphrase>` and "
             "`token=<the token line the binary prints for it>`."],
        )
        test_initial = pytest_module(f'''
            import os
            import struct

            BIN = "{bin_path}"


            def section_names(data):
                assert data[:4] == b"\\x7fELF" and data[4] == 2, "not a 64-bit ELF file"
                shoff = struct.unpack_from("<Q", data, 0x28)[0]
                shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)

                def header(i):
                    return struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize)

                names_off = header(shstrndx)[4]
                names = []
                for i in range(shnum):
                    start = names_off + header(i)[0]
                    names.append(data[start:data.index(b"\\0", start)].decode())
                return names


            def test_binary_is_a_stripped_executable():
                assert os.access(BIN, os.X_OK)
                with open(BIN, "rb") as fh:
                    names = section_names(fh.read())
                assert ".text" in names
                assert ".symtab" not in names


            def test_nothing_recovered_yet():
                assert not os.path.exists("{out}")
        ''')
        test_final = pytest_module(f'''
            import hashlib
            import subprocess

            BIN = "{bin_path}"
            PASSPHRASE = {passphrase!r}
            TOKEN = {token!r}


            def test_recovered_file():
                with open("{out}") as fh:
                    lines = [line.strip() for line in fh if line.strip()]
                assert lines == ["passphrase=" + PASSPHRASE, "token=" + TOKEN]


            def test_binary_untouched_and_agrees():
                with open(BIN, "rb") as fh:
                    assert hashlib.sha256(fh.read()).hexdigest() == {elf_sha!r}
                res = subprocess.run([BIN, PASSPHRASE], capture_output=True, text=True, timeout=10)
                assert res.returncode == 0
                assert res.stdout.strip() == TOKEN
        ''')
        # The oracle finds the side channel itself: the baseline status of an empty guess, then
        # one more for every leading character that matches.
        solve = bash_script(f'''
            python3 - <<'PY'
            import string
            import subprocess

            BIN = "{bin_path}"
            ALPHABET = string.ascii_lowercase + string.digits


            def probe(guess):
                res = subprocess.run([BIN, guess], capture_output=True, text=True)
                return res.returncode, res.stdout.strip()


            baseline, _ = probe("")
            known = ""
            while True:
                for ch in ALPHABET:
                    status, out = probe(known + ch)
                    if status == 0:
                        with open("{out}", "w") as fh:
                            fh.write(f"passphrase={{known + ch}}\\ntoken={{out}}\\n")
                        raise SystemExit(0)
                    if status == baseline + len(known) + 1:
                        known += ch
                        break
                else:
                    raise SystemExit(f"no character extends the prefix {{known!r}}")
            PY
        ''')
        return TaskSpec(
            instruction=instruction,
            setup_sh=bash_script(f"""
                mkdir -p /app/bin
                cp /tmp/env/fixtures/{binary} {bin_path}
                chmod 755 {bin_path}
            """),
            test_initial=test_initial,
            test_final=test_final,
            solve_sh=solve,
            truth={
                "given": {"binary": bin_path, "alphabet": "lowercase letters and digits"},
                "passphrase": passphrase,
                "token": token,
                "revoked_decoys": decoys,
                "exit_status_base": status_base,
            },
            verifier_kind="exact_text",
            fixture_kind="stripped_binary",
            fixtures={binary: elf},
            output_paths=[out],
            apt_packages=("binutils",),
        )


# --------------------------------------------------------------------------------------------------
# adversarial_corpus: an upload-path guard


CORPUS_SIZE = {"short": 40, "moderate": 60, "complex": 90, "intricate": 120}
EXTENSION_POOL = ("png", "jpg", "jpeg", "gif", "pdf", "txt", "csv", "webp", "md", "json")
BAD_EXTENSIONS = ("php", "exe", "sh", "html", "svg", "js", "phtml", "jsp", "py", "bat")
DIR_POOL = ("img", "docs", "2024", "user_42", "a-b", "reports", "tmp", "x", "q3", "team.alpha",
            "archive", "v1.2", "in_box", "public")
NAME_CHARS = string.ascii_letters + string.digits + "_-"

# The guard is written once: the oracle installs this program and the generator runs the very
# same text to label the hidden corpus, so key and solution cannot drift apart.
GUARD_TEMPLATE = '''\
import re
import sys

ALLOWED_EXTENSIONS = {extensions!r}
BACKSLASH_IS_SEPARATOR = {backslash!r}
PARENT_POLICY = {policy!r}
MAX_DIRECTORIES = {max_dirs!r}
SAFE_SEGMENT = re.compile(r"[A-Za-z0-9._-]+")
PERCENT = re.compile(r"%([0-9A-Fa-f]{{2}})")


def decode(text):
    while True:
        decoded = PERCENT.sub(lambda m: chr(int(m.group(1), 16)), text)
        if decoded == text:
            return text
        text = decoded


def judge(raw):
    text = decode(raw)
    if any(not (" " <= ch <= "~") for ch in text):
        return "DENY"
    if BACKSLASH_IS_SEPARATOR:
        text = text.replace("\\\\", "/")
    if text.startswith("/"):
        return "DENY"
    parts = []
    for segment in text.split("/"):
        if segment in ("", "."):
            continue
        if segment == "..":
            if PARENT_POLICY == "strict" or not parts:
                return "DENY"
            parts.pop()
            continue
        if segment.startswith(".") or not SAFE_SEGMENT.fullmatch(segment):
            return "DENY"
        parts.append(segment)
    if not parts:
        return "DENY"
    stem, dot, extension = parts[-1].rpartition(".")
    if not dot or not stem or extension.lower() not in ALLOWED_EXTENSIONS:
        return "DENY"
    if len(parts) - 1 > MAX_DIRECTORIES:
        return "DENY"
    return "ALLOW " + "/".join(parts)


def main():
    data = sys.stdin.read()
    lines = data.split("\\n")
    if data.endswith("\\n"):
        lines.pop()
    sys.stdout.write("".join(judge(line) + "\\n" for line in lines))


if __name__ == "__main__":
    main()
'''


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

    name = "upload_path_guard"
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
    domains = ("security",)
    verifier_kinds = ("adversarial_corpus",)
    fixture_kinds = ("text_only",)
    summary = "implement a path-traversal guard for upload paths, graded on a hidden adversarial corpus"
    skill_types = ("input_hardening",)
    skills = ("detect path traversal attempts in request paths", "reject injection payloads with an allow-list validator")
    languages = ("python",)
    command_complexities = ("bash_code",)

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
        complexity = sig.get("task_complexity", "moderate")
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
        size = CORPUS_SIZE.get(complexity, 60)
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



# --------------------------------------------------------------------------------------------------
# text_only: brute-force logins in rotated sshd auth logs


MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
SSH_HOSTS = ("bastion", "web-01", "edge-gw", "build-02", "db-proxy", "vpn-01")
LOCAL_USERS = {"root": 0, "deploy": 1001, "git": 1002, "backup": 1003, "ops": 1004, "jenkins": 1005}
GUESSED_USERS = ("admin", "test", "oracle", "ubuntu", "pi", "guest", "support", "ftpuser", "postgres", "user")
SUDO_COMMANDS = ("/usr/bin/systemctl restart nginx", "/usr/bin/apt-get update", "/usr/bin/journalctl -u sshd",
                 "/usr/sbin/nft list ruleset")


class _AuthLog:
    """A host's sshd/PAM/cron log being written. Each record is (time, seq, text, fact); fact is
    ("fail", address, attempts) or ("ok", address, user) for the lines the answer depends on."""

    def __init__(self, rng: random.Random, host: str, lvl: int):
        self.rng, self.host, self.lvl, self.records = rng, host, lvl, []

    def add(self, t: datetime, program: str, msg: str, fact: tuple | None = None, pid: int | None = None):
        pid = pid or self.rng.randint(300, 65000)
        stamp = f"{MONTHS[t.month - 1]} {t.day:>2} {t:%H:%M:%S}"
        tag = program if program == "sudo" else f"{program}[{pid}]"
        self.records.append((t, len(self.records), f"{stamp} {self.host} {tag}: {msg}", fact))

    def failures(self, ip: str, times: list[datetime], target: str) -> None:
        """Failed password attempts at `times`, grouped into connections (a new one after a pause)."""
        conns: list[list[datetime]] = []
        for t in sorted(times):
            if conns and (t - conns[-1][-1]).total_seconds() <= 60 and len(conns[-1]) < 6:
                conns[-1].append(t)
            else:
                conns.append([t])
        for conn in conns:
            pid, port = self.rng.randint(1000, 65000), self.rng.randint(32768, 60999)
            user = target if self.rng.random() < 0.5 else self.rng.choice(GUESSED_USERS)
            who = user if user in LOCAL_USERS else f"invalid user {user}"
            method = "keyboard-interactive/pam" if self.lvl >= 2 and self.rng.random() < 0.3 else "password"
            failed = f"Failed {method} for {who} from {ip} port {port} ssh2"
            if user not in LOCAL_USERS and self.lvl >= 1:
                self.add(conn[0], "sshd", f"Invalid user {user} from {ip} port {port}", pid=pid)
            if self.lvl >= 1:  # PAM's own failure line names the address too: it must not be counted
                rhost = f"rhost={ip}" + (f"  user={user}" if user in LOCAL_USERS else "")
                self.add(conn[0], "sshd", "pam_unix(sshd:auth): authentication failure; logname= uid=0 euid=0 "
                         f"tty=ssh ruser= {rhost}", pid=pid)
            if self.lvl >= 2 and len(conn) >= 3 and self.rng.random() < 0.5:
                # rsyslog folds identical consecutive messages: one line stands for len-1 attempts.
                self.add(conn[0], "sshd", failed, ("fail", ip, 1), pid)
                self.add(conn[-1], "sshd", f"message repeated {len(conn) - 1} times: [ {failed}]",
                         ("fail", ip, len(conn) - 1), pid)
            else:
                for t in conn:
                    self.add(t, "sshd", failed, ("fail", ip, 1), pid)
            end = conn[-1] + timedelta(seconds=self.rng.randint(0, 3))
            if len(conn) > 1 and self.lvl >= 1:
                self.add(end, "sshd", f"PAM {len(conn) - 1} more authentication failures; logname= uid=0 euid=0 "
                         f"tty=ssh ruser= rhost={ip}", pid=pid)
            state = "authenticating user" if user in LOCAL_USERS else "invalid user"
            self.add(end, "sshd", f"Connection closed by {state} {user} {ip} port {port} [preauth]", pid=pid)

    def login(self, t: datetime, ip: str, user: str, method: str = "password") -> None:
        pid, port = self.rng.randint(1000, 65000), self.rng.randint(32768, 60999)
        key = f": ED25519 SHA256:{self.rng.randbytes(12).hex()}" if method == "publickey" else ""
        self.add(t, "sshd", f"Accepted {method} for {user} from {ip} port {port} ssh2{key}", ("ok", ip, user), pid)
        self.add(t, "sshd", f"pam_unix(sshd:session): session opened for user {user}(uid={LOCAL_USERS[user]}) "
                 "by (uid=0)", pid=pid)
        self.add(t, "systemd-logind", f"New session {self.rng.randint(2, 900)} of user {user}.")
        self.add(t + timedelta(minutes=self.rng.randint(1, 90)), "sshd",
                 f"pam_unix(sshd:session): session closed for user {user}", pid=pid)


def _burst(rng: random.Random, end: datetime, n: int, max_gap: int) -> list[datetime]:
    """n attempt times, the last at `end`, each 2..max_gap seconds after the one before."""
    times = [end]
    for _ in range(n - 1):
        times.append(times[-1] - timedelta(seconds=rng.randint(2, max(2, max_gap))))
    return sorted(times)


def bruteforce_findings(records: list[tuple], window_min: int, threshold: int) -> list[str]:
    """The answer key, from the facts behind the lines (the oracle reads the text instead)."""
    fails: dict[str, list[datetime]] = {}
    for t, _, _, fact in records:
        if fact and fact[0] == "fail":
            fails.setdefault(fact[1], []).extend([t] * fact[2])
    found = []
    for t, _, _, fact in records:
        if fact and fact[0] == "ok":
            counted = [f for f in fails.get(fact[1], []) if t - timedelta(minutes=window_min) <= f <= t]
            if len(counted) >= threshold:
                found.append((t, fact[1], fact[2], f"{fact[1]} {fact[2]} {min(counted):%Y-%m-%dT%H:%M:%S} "
                                                   f"{t:%Y-%m-%dT%H:%M:%S} {len(counted)}"))
    return [line for *_, line in sorted(found)]


class SshBruteForceLogins(TaskFamily):
    """Find the sshd logins that followed a burst of failed passwords from the same address."""

    name = "ssh_bruteforce_logins"
    method = (
        ('Read the rotated files oldest first (highest number first, decompressing .gz ones), give every line '
         'a full date by carrying the year forward and bumping it when the month goes backwards, and keep only '
         'sshd lines. Match the Failed and Accepted messages by their structure and take the address after '
         '`from`, not any IP-looking text: PAM lines repeat the address as rhost=, and substring matching '
         "confuses addresses that share a prefix. Expand rsyslog's `message repeated K times` into K attempts. "
         "For each Accepted line count that address's failures inside the inclusive window ending at the "
         'login, and test the edges (an attempt exactly on the boundary, one a second outside).', None),
    )
    domains = ("security",)
    verifier_kinds = ("exact_text",)
    fixture_kinds = ("text_only",)
    summary = "find successful SSH logins preceded by a burst of failures from one address in rotated auth logs"
    skill_types = ("log_forensics",)
    skills = ("spot bursts of failed logins from one source", "rebuild an attack timeline from authentication logs")
    languages = ("python", "bash", "awk")
    anchors = ("OpenSSH",)
    command_complexities = ("bash_code", "bash_only")

    def build(self, sig: dict, rng: random.Random) -> TaskSpec:
        lvl = complexity_level(sig)
        window, threshold = rng.choice((5, 10, 15, 30)), rng.randint(3, 6)
        year = rng.randint(2021, 2025)
        hours = (20, 40, 80, 120)[lvl]
        if lvl == 3:  # the rotation spans New Year: the year has to be carried over
            start = datetime(year, 12, rng.randint(28, 29), rng.randint(0, 23))
        else:
            start = datetime(year, rng.randint(1, 12), rng.randint(1, 28), rng.randint(0, 23))
        log = _AuthLog(rng, rng.choice(SSH_HOSTS), lvl)
        nets = ("203.0.113", "198.51.100", "192.0.2")[: (3, 2, 2, 2)[lvl]]  # fewer nets: more prefix look-alikes
        used: set[str] = set()

        def attacker() -> str:
            while True:
                if lvl >= 2 and rng.random() < 0.3:
                    ip = f"2001:db8:{rng.randint(1, 0xffff):x}::{rng.randint(1, 0xffff):x}"
                else:
                    ip = f"{rng.choice(nets)}.{rng.randint(1, 254)}"
                if ip not in used:
                    used.add(ip)
                    return ip

        def when() -> datetime:
            return start + timedelta(seconds=rng.randint(3600, hours * 3600))

        span = window * 60
        tight = max(3, (span - 120) // (threshold + 4))  # gap that keeps a whole burst inside the window

        def target() -> str:  # the account an attack aims at (a real one, so the login can succeed)
            return rng.choice(list(LOCAL_USERS))

        n_legit, n_scan, n_cron = ((3, 1, 6), (6, 2, 12), (12, 5, 40), (20, 8, 80))[lvl]
        n_pos = rng.randint(*((2, 3), (2, 3), (3, 4), (3, 5))[lvl])
        for k in range(n_pos):
            ip, user, t = attacker(), target(), when()
            if lvl == 3 and k == 0:  # one finding after New Year, where a year not carried over shows
                t = datetime(year + 1, 1, 1, 1) + timedelta(seconds=rng.randint(0, 19 * 3600))
            log.failures(ip, _burst(rng, t - timedelta(seconds=rng.randint(5, 60)),
                                    threshold + rng.randint(0, 4), tight), user)
            log.login(t, ip, user)
            if lvl == 3 and rng.random() < 0.5:  # the attacker comes back: a second finding
                log.login(t + timedelta(seconds=rng.randint(20, 90)), ip, user)
        for _ in range(1 + (lvl == 3)):  # one attempt short of the threshold
            ip, user, t = attacker(), target(), when()
            log.failures(ip, _burst(rng, t - timedelta(seconds=rng.randint(5, 60)), threshold - 1, tight), user)
            log.login(t, ip, user)
        if lvl >= 1:
            # Failures from one address, the login from another; and a login hours after the burst.
            a, b, user, t = attacker(), attacker(), target(), when()
            log.failures(a, _burst(rng, t - timedelta(seconds=30), threshold + 2, tight), user)
            log.login(t, b, user)
            ip, user, t = attacker(), target(), when()
            log.failures(ip, _burst(rng, t - timedelta(hours=rng.randint(2, 6)), threshold + 3, tight), user)
            log.login(t, ip, user)
        if lvl >= 2:
            # The burst's first attempt lies just outside the window; and a burst longer than the window.
            ip, user, t = attacker(), target(), when()
            early = t - timedelta(seconds=span + rng.randint(1, 30))
            log.failures(ip, [early] + _burst(rng, t - timedelta(seconds=10), threshold - 1, tight), user)
            log.login(t, ip, user)
            ip, user, t = attacker(), target(), when()
            n = 2 * threshold + 2
            log.failures(ip, _burst(rng, t - timedelta(seconds=8), n, int(1.6 * span / n)), user)
            log.login(t, ip, user)
        if lvl == 3:  # the first attempt exactly on the window's edge: counted (both ends included)
            ip, user, t = attacker(), target(), when()
            log.failures(ip, [t - timedelta(seconds=span)] + _burst(rng, t - timedelta(seconds=12),
                                                                    threshold - 1, tight), user)
            log.login(t, ip, user)
        for _ in range(n_scan):
            log.failures(attacker(), _burst(rng, when(), rng.randint(threshold, 4 * threshold), 20),
                         rng.choice(GUESSED_USERS))
        offices = [f"10.20.{rng.randint(0, 9)}.{rng.randint(2, 250)}" for _ in range(3)]
        for _ in range(n_legit):
            ip, user, t = rng.choice(offices), target(), when()
            if rng.random() < 0.3:  # a typo first: one failure is no attack
                log.failures(ip, [t - timedelta(seconds=rng.randint(3, 8))], user)
                log.login(t, ip, user)
            else:
                log.login(t, ip, user, "publickey")
            if rng.random() < 0.5:
                log.add(t + timedelta(seconds=rng.randint(20, 600)), "sudo",
                        f"  {user} : TTY=pts/{rng.randint(0, 4)} ; PWD=/home/{user} ; USER=root ; "
                        f"COMMAND={rng.choice(SUDO_COMMANDS)}")
        for _ in range(n_cron):
            t, pid = when(), rng.randint(300, 65000)
            log.add(t, "CRON", "pam_unix(cron:session): session opened for user root(uid=0) by (uid=0)", pid=pid)
            log.add(t + timedelta(seconds=rng.randint(0, 2)), "CRON",
                    "pam_unix(cron:session): session closed for user root", pid=pid)

        records = sorted(log.records)
        expected = bruteforce_findings(records, window, threshold)
        n_files = (2, 3, 4, 5)[lvl]
        # Rotation by size, roughly: near-equal files, a little uneven.
        step = len(records) // n_files
        cuts = [k * step + rng.randint(-step // 4, step // 4) for k in range(1, n_files)]
        chunks = [records[a:b] for a, b in zip([0, *cuts], [*cuts, len(records)])]
        fixtures: dict[str, bytes] = {}
        for age, chunk in enumerate(reversed(chunks)):  # auth.log is the newest
            data = "".join(text + "\n" for _, _, text, _ in chunk).encode()
            name = "auth.log" + (f".{age}" if age else "")
            if lvl == 3 and age >= 2:  # logrotate's delaycompress; mtime=0 keeps the bytes reproducible
                name, data = name + ".gz", gzip.compress(data, mtime=0)
            fixtures[f"logs/{name}"] = data
        older = (", and from `auth.log.2` on they are gzip-compressed (`auth.log.2.gz`, ...)" if lvl == 3 else "")
        repeat_rule = ("\n- rsyslog folds repeats: an sshd message `message repeated K times: [ Failed ...]` "
                       "stands for K more failed attempts from that address, all at that line's time."
                       if lvl >= 2 else "")
        out = "/app/bruteforce_logins.txt"
        body = (
            f"Overnight alerting flagged `{log.host}` for SSH password guessing. Its authentication logs "
            "are in `/app/logs/`: `auth.log` is the newest, then `auth.log.1` and so on back in time"
            f"{older}. Together they form one continuous syslog stream of lines "
            "`Mon DD HH:MM:SS host program[pid]: message`. Timestamps carry no year: the oldest entry is "
            f"from {year}, entries are in chronological order from the oldest file to the newest, and a "
            "month earlier than the previous line's means the year has rolled over.\n\n"
            "Find the logins that most likely came out of a brute-force attack:\n\n"
            "- A failed attempt is an sshd message `Failed <method> for <user> from <address> port <port> ...` "
            "(the user may be preceded by `invalid user `). PAM messages, `Invalid user` notices and "
            f"disconnects are not failed attempts.{repeat_rule}\n"
            "- A login is an sshd message `Accepted <method> for <user> from <address> port <port> ...`.\n"
            f"- A login is a finding when at least {threshold} failed attempts from the same address have a "
            f"time between {window} minutes before the login and the login's time, both ends included.\n\n"
            "Write one line per finding: `<address> <user> <first> <login> <count>` (single spaces), where "
            "`<user>` is the account that logged in, `<login>` the login's time, `<first>` the time of the "
            "earliest failed attempt counted for it and `<count>` how many were counted. Write times as "
            "`YYYY-MM-DDTHH:MM:SS` and addresses exactly as the log does. Sort the lines by login time, "
            "then address, then user (byte order)."
        )
        instruction = instruction_frame(sig, "Which SSH logins followed a brute-force burst?", body,
                                        [f"`{out}`: one line per finding, sorted as described."])
        test_initial = py_source("""
            import os

            __CONSTANTS__

            def test_logs_present():
                assert sorted(os.listdir("/app/logs")) == NAMES

            def test_no_report_yet():
                assert not os.path.exists(OUT)
            """, NAMES=sorted(n.split("/", 1)[1] for n in fixtures), OUT=out)
        test_final = lines_final_test("test_findings_match", out, expected)
        solve = python_oracle(py_source("""
            import glob
            import gzip
            import re
            from datetime import datetime, timedelta

            __CONSTANTS__
            MONTHS = {m: i + 1 for i, m in enumerate("Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split())}
            LINE = re.compile(r"^(\\w{3}) +(\\d+) (\\d\\d):(\\d\\d):(\\d\\d) \\S+ ([^\\[:]+)(?:\\[\\d+\\])?: (.*)$")
            FAILED = re.compile(r"^Failed \\S+ for (?:invalid user )?\\S+ from (\\S+) port \\d+")
            ACCEPTED = re.compile(r"^Accepted \\S+ for (\\S+) from (\\S+) port \\d+")
            REPEATED = re.compile(r"^message repeated (\\d+) times: \\[ (.*)\\]$")

            def age(path):
                m = re.search(r"auth\\.log(?:\\.(\\d+))?(?:\\.gz)?$", path)
                return int(m.group(1) or 0)

            year, last_month, fails, found = YEAR, None, {}, []
            for path in sorted(glob.glob("/app/logs/auth.log*"), key=age, reverse=True):
                with (gzip.open if path.endswith(".gz") else open)(path, "rt") as fh:
                    for line in fh:
                        m = LINE.match(line.rstrip("\\n"))
                        if not m:
                            continue
                        month = MONTHS[m[1]]
                        if last_month is not None and month < last_month:
                            year += 1
                        last_month = month
                        t = datetime(year, month, int(m[2]), int(m[3]), int(m[4]), int(m[5]))
                        if m[6] != "sshd":
                            continue
                        msg, times = m[7], 1
                        r = REPEATED.match(msg)
                        if r:
                            msg, times = r[2], int(r[1])
                        f, a = FAILED.match(msg), ACCEPTED.match(msg)
                        if f:
                            fails.setdefault(f[1], []).extend([t] * times)
                        elif a:
                            counted = [x for x in fails.get(a[2], []) if t - timedelta(minutes=WINDOW) <= x <= t]
                            if len(counted) >= THRESHOLD:
                                iso = "%Y-%m-%dT%H:%M:%S"
                                found.append((t, a[2], a[1], f"{a[2]} {a[1]} {min(counted):{iso}} {t:{iso}} "
                                                             f"{len(counted)}"))
            with open(OUT, "w") as fh:
                fh.writelines(line + "\\n" for *_, line in sorted(found))
            """, YEAR=year, WINDOW=window, THRESHOLD=threshold, OUT=out))
        return TaskSpec(
            instruction=instruction,
            setup_sh=bash_script("mkdir -p /app/logs && cp /tmp/env/fixtures/logs/* /app/logs/"),
            test_initial=test_initial,
            test_final=test_final,
            solve_sh=solve,
            truth={"given": {"host": log.host, "window_minutes": window, "threshold": threshold, "first_year": year},
                   "expected_lines": expected, "log_lines": len(records)},
            verifier_kind="exact_text",
            fixture_kind="text_only",
            fixtures=fixtures,
            output_paths=[out],
        )


FAMILIES = [BinaryPassphraseRecovery, UploadPathGuard, SshBruteForceLogins]
