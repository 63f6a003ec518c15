"""Recover a passphrase and its unlock token from a stripped binary compiled from a C template."""

from __future__ import annotations

import hashlib
import random
import shutil
import string
import subprocess
import tempfile
from pathlib import Path

from termforge.errors import TermforgeError
from termforge.generate.base import (DifficultyKnobs, FamilyAxes, TaskFamily, TaskSpec, bash_script, complexity_level,
                                      instruction_frame, pytest_module)
from termforge.generate.families.package_files import family_template


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


BINARY_NAMES = ("gatekeeper", "vaultctl", "licensed", "unlockd", "keyguard", "sealtool")
TOKEN_PREFIXES = ("UNLOCK", "GRANT", "TOKEN", "LEASE", "OPEN")
DECOY_WORDS = ("admin", "letmein", "vendor", "master", "default", "service", "backup", "support",
               "factory", "override")
PASS_ALPHABET = string.ascii_lowercase + string.digits

C_TEMPLATE = family_template(__name__, "checker.c.txt")


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

    knobs = DifficultyKnobs(key_length=(6, 8, 10, 12), decoy_words=(1, 2, 3, 4))
    axes = FamilyAxes(name="binary_passphrase_recovery", domains=("security",), verifier_kinds=("exact_text",),
                      fixture_kinds=("stripped_binary",), skill_types=("artifact_triage",),
                      skills=("extract printable strings from an unknown binary",
                              "read ELF headers, sections and imported symbols"), languages=("bash", "python"),
                      command_complexities=("bash_only", "bash_code"),
                      summary="recover a lost passphrase and the unlock token from a stripped ELF binary")
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


    def build(self, sig: dict, rng: random.Random) -> TaskSpec:
        knobs = self.knobs.at(complexity_level(sig))
        key_len = knobs.key_length
        binary = rng.choice(BINARY_NAMES)
        prefix = rng.choice(TOKEN_PREFIXES)
        passphrase = "".join(rng.choice(PASS_ALPHABET) for _ in range(key_len))
        # Decoys carry a non-alphanumeric character, so they can never be the real passphrase and
        # they are what `strings` shows first: a lead that has to be tested, not trusted.
        decoys = []
        for word in rng.sample(DECOY_WORDS, knobs.decoy_words):
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


FAMILY = BinaryPassphraseRecovery
