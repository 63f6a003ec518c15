"""Verifier kinds as strategies: checks any family's task can add to its own final test.

A strategy asks for one more deliverable, a program, and grades it the way its kind means:

- fuzz_equivalence: the agent's bundle decoder must agree with the reference decoder on fresh
  containers of the task's fixture kind (random contents and sizes, edge sizes included);
- metric_threshold: the same decoder is scored on a harder set (the harshest settings the format
  allows: every PNG filter, noise, shuffled and repeated frames ...) and passes above a threshold;
- adversarial_corpus: the agent's archive extractor meets a hidden corpus of hostile archives
  (path traversal, absolute paths, links out of the destination, devices, a damaged archive);
- multi_protocol: every deliverable of the family is served three ways, from its file, by a
  command and over HTTP, and the three must agree.

The programs run as subprocesses of the final test, each in its own process group that is killed
afterwards; the test module never loads agent code. The family's own final test still decides the
task: a strategy only adds tests.
"""

from __future__ import annotations

import base64
import json
import random
import textwrap
from dataclasses import dataclass, field
from typing import ClassVar

from termforge.generate.bundles import Container, encoded

BIN = "/app/bin"
# The decoder strategies' fresh containers, made when the task is generated (tests/ beside the test).
MADE_AHEAD = "fresh_containers.json"

RUN_TOOL = '''
import os as _tf_os
import signal as _tf_signal
import socket as _tf_socket
import subprocess as _tf_subprocess
import sys as _tf_sys


def _tf_run(argv, timeout=120, **kw):
    """Run an agent program in its own process group; whatever it leaves running is killed."""
    proc = _tf_subprocess.Popen(argv, start_new_session=True, stdout=_tf_subprocess.PIPE,
                                stderr=_tf_subprocess.PIPE, **kw)
    try:
        out, err = proc.communicate(timeout=timeout)
    except _tf_subprocess.TimeoutExpired:
        out, err = b"", b"timed out"
    finally:
        _tf_stop(proc)
    return proc.returncode, out, err


def _tf_stop(proc):
    """Kill the program's whole process group (whatever it started) and reap it."""
    try:
        _tf_os.killpg(proc.pid, _tf_signal.SIGKILL)
    except OSError:
        pass
    proc.wait()


def _tf_free_port():
    with _tf_socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
'''


@dataclass(frozen=True)
class FinalTests:
    """What a strategy adds to a task's final test: pytest source, and data files beside it in
    tests/ (name -> bytes)."""

    source: str
    data: dict[str, bytes] = field(default_factory=dict)


class VerifierStrategy:
    kind: ClassVar[str]
    tool: ClassVar[str]
    needs_container: ClassVar[bool] = True

    def applies(self, output_paths: list[str]) -> str | None:
        """Why the strategy cannot apply to a task with these outputs (None: it can)."""
        return None

    def deliverable(self, container: Container | None, params: dict | None) -> str:  # pragma: no cover
        raise NotImplementedError

    def oracle(self, container: Container | None, output_paths: list[str]) -> str:  # pragma: no cover
        raise NotImplementedError

    def final_tests(self, container: Container | None, params: dict | None, output_paths: list[str],
                    rng: random.Random, level: int) -> FinalTests:  # pragma: no cover - interface
        raise NotImplementedError


def write_program(path: str, source: str) -> str:
    """Bash that writes an executable Python program (used by the oracles)."""
    return (f"mkdir -p {BIN}\ncat > {path} <<'TERMFORGE_TOOL'\n#!/usr/bin/env python3\n{source.strip()}\n"
            f"TERMFORGE_TOOL\nchmod 755 {path}\n")


def _payloads(rng: random.Random, count: int) -> list[bytes]:
    sizes = [0, 1, rng.randint(2, 40), 255, 256, rng.randint(300, 700)] + [rng.randint(1, 600) for _ in range(count)]
    return [bytes(rng.randrange(256) for _ in range(n)) for n in sizes[:count]]


class DecoderEquivalence(VerifierStrategy):
    kind = "fuzz_equivalence"
    tool = f"{BIN}/decode-bundle"
    cases = 6
    hard = False

    def deliverable(self, container, params):
        target = "a services directory like `/app/services`" if container.kind == "multi_service_compose" else \
            "a container file"
        return (f"`{self.tool}`: an executable. `decode-bundle CONTAINER OUTPUT` reads {target} in the same format as "
                "yours (other contents, sizes and settings) and writes the bytes of the bundle it holds to OUTPUT, "
                "exit status 0. It is checked against the reference decoder on fresh containers" + self._scoring())

    def _scoring(self) -> str:
        return "; every one must match byte for byte."

    def oracle(self, container, output_paths):
        main = ("import sys\nwith open(sys.argv[2], 'wb') as fh:\n    fh.write(decode(sys.argv[1]))\n")
        return write_program(self.tool, container.decoder + "\n" + main)

    def final_tests(self, container, params, output_paths, rng, level):
        payloads = _payloads(rng, self.cases)
        cases = [{"payload": base64.b64encode(p).decode(), "params": container.fuzz_params(params, rng, self.hard)}
                 for p in payloads]
        data = {}
        if container.made_ahead:
            # The fresh containers are made once, here, by the same encoder, rather than in each of
            # the 20 or so grades validation gives the task.
            made = []
            for case, payload in zip(cases, payloads):
                blob, executable = encoded(container, payload, {**params, **case["params"]})
                made.append({"bytes": base64.b64encode(blob).decode(), "executable": executable})
            data[MADE_AHEAD] = (json.dumps({"containers": made}, sort_keys=True) + "\n").encode()
        encoder = container.encoder + textwrap.dedent('''
            import base64, json, sys
            job = json.load(sys.stdin)
            encode(base64.b64decode(job["payload"]), job["path"], job["params"])
            ''')
        body = RUN_TOOL + textwrap.dedent('''
            import base64 as _tf_base64
            import json as _tf_json
            import tempfile as _tf_tempfile

            _TF_TOOL = {tool!r}
            _TF_IS_DIR = {is_dir!r}
            _TF_BASE = _tf_json.loads({base!r})
            _TF_CASES = _tf_json.loads({cases!r})
            _TF_ENCODER = {encoder!r}


            def _tf_made_ahead():
                """The fresh containers made when the task was generated ({made_ahead} beside this
                file; None: each is encoded here). Read once, on import, then removed, so no program
                a test runs finds them."""
                path = _tf_os.path.join(_tf_os.path.dirname(_tf_os.path.abspath(__file__)), {made_ahead!r})
                try:
                    with open(path) as fh:
                        made = _tf_json.load(fh)["containers"]
                except (OSError, ValueError, KeyError, TypeError):
                    return None
                try:
                    _tf_os.unlink(path)
                except OSError:
                    pass
                return made if len(made) == len(_TF_CASES) else None


            _TF_MADE = _tf_made_ahead()


            def _tf_decoded(i, case, tmp):
                params = {{**_TF_BASE, **case["params"]}}
                if params.get("ports") == "free":
                    params["ports"] = [_tf_free_port() for _ in range(3)]
                container = _tf_os.path.join(tmp, "container")
                if _TF_IS_DIR:
                    _tf_os.makedirs(container)
                if _TF_MADE is not None:
                    with open(container, "wb") as fh:
                        fh.write(_tf_base64.b64decode(_TF_MADE[i]["bytes"]))
                    if _TF_MADE[i]["executable"]:
                        _tf_os.chmod(container, 0o755)
                else:
                    job = _tf_json.dumps({{"payload": case["payload"], "path": container, "params": params}})
                    made = _tf_subprocess.run([_tf_sys.executable, "-I", "-c", _TF_ENCODER], input=job.encode(),
                                              capture_output=True, timeout=120)
                    assert made.returncode == 0, made.stderr.decode()[-2000:]
                out = _tf_os.path.join(tmp, "bundle.out")
                code, _, err = _tf_run([_TF_TOOL, container, out], cwd=tmp)
                if code != 0 or not _tf_os.path.isfile(out):
                    return False, err.decode(errors="replace")[-300:]
                with open(out, "rb") as fh:
                    return fh.read() == _tf_base64.b64decode(case["payload"]), "wrong bytes"


            def _tf_results():
                assert _tf_os.access(_TF_TOOL, _tf_os.X_OK), f"{{_TF_TOOL}} is missing or not executable"
                results = []
                for i, case in enumerate(_TF_CASES):
                    with _tf_tempfile.TemporaryDirectory() as tmp:
                        results.append(_tf_decoded(i, case, tmp))
                return results
            ''').format(tool=self.tool, is_dir=container.kind == "multi_service_compose",
                        base=json.dumps(params, sort_keys=True), cases=json.dumps(cases, sort_keys=True),
                        encoder=encoder, made_ahead=MADE_AHEAD)
        return FinalTests(body + self._test(), data)

    def _test(self) -> str:
        return textwrap.dedent('''

            def test_bundle_decoder_agrees_with_the_reference_on_fresh_containers():
                results = _tf_results()
                failed = [(i, why) for i, (ok, why) in enumerate(results) if not ok]
                assert not failed, f"containers decoded wrongly: {failed}"
            ''')


class DecoderScore(DecoderEquivalence):
    kind = "metric_threshold"
    cases = 10
    hard = True
    threshold = 0.8

    def _scoring(self):
        return (f", made with the harshest settings the format allows; the score is the share decoded byte for "
                f"byte, and it must be at least {self.threshold:.0%}.")

    def _test(self):
        return textwrap.dedent(f'''

            def test_bundle_decoder_scores_above_the_threshold_on_hard_containers():
                results = _tf_results()
                score = sum(ok for ok, _ in results) / len(results)
                assert score >= {self.threshold!r}, f"score {{score:.2f}} below {self.threshold!r}: {{results}}"
            ''')


SAFE_EXTRACT = '''
import os, stat, sys, tarfile

def main(archive, dest):
    dest = os.path.realpath(dest)
    os.makedirs(dest, exist_ok=True)
    try:
        tar = tarfile.open(archive, "r:gz")
        members = tar.getmembers()
    except (OSError, tarfile.TarError, EOFError) as exc:
        print(f"unreadable archive: {exc}", file=sys.stderr)
        return 1
    with tar:
        for m in members:
            target = os.path.realpath(os.path.join(dest, m.name))
            inside = target == dest or target.startswith(dest + os.sep)
            if not inside or os.path.isabs(m.name) or not (m.isreg() or m.isdir()):
                print(f"skipped: {m.name}", file=sys.stderr)
                continue
            if m.isdir():
                os.makedirs(target, exist_ok=True)
                os.chmod(target, stat.S_IMODE(m.mode) | 0o700)
                continue
            os.makedirs(os.path.dirname(target), exist_ok=True)
            try:
                data = tar.extractfile(m).read()
            except (OSError, tarfile.TarError, EOFError) as exc:
                print(f"unreadable archive: {exc}", file=sys.stderr)
                return 1
            with open(target, "wb") as fh:
                fh.write(data)
            os.chmod(target, stat.S_IMODE(m.mode))
    return 0

sys.exit(main(sys.argv[1], sys.argv[2]))
'''


class HostileArchives(VerifierStrategy):
    kind = "adversarial_corpus"
    tool = f"{BIN}/safe-extract"

    def deliverable(self, container, params):
        return (f"`{self.tool}`: an executable. `safe-extract ARCHIVE DEST` extracts a gzip-compressed tar archive "
                "(like the bundle) into DEST. Regular files and directories whose path stays inside DEST are "
                "extracted with their contents and permission bits; every other member (absolute paths, `..` "
                "that leaves DEST, symbolic or hard links, devices, FIFOs) is skipped, with a line `skipped: NAME` "
                "on standard error. Exit status 0, or non-zero for an archive that cannot be read. It is run on a "
                "hidden corpus of hostile archives; nothing may ever be written outside DEST.")

    def oracle(self, container, output_paths):
        return write_program(self.tool, SAFE_EXTRACT)

    def final_tests(self, container, params, output_paths, rng, level):
        names = ["notes.txt", f"data/part-{rng.randint(1, 99)}.bin", "dir with space/file name.txt",
                 "unicod\u00e9/\u00fcber.txt", "deep/a/b/c/d.txt"]
        files = {n: base64.b64encode(bytes(rng.randrange(256) for _ in range(rng.randint(0, 300)))).decode()
                 for n in names}
        return FinalTests(RUN_TOOL + textwrap.dedent('''
            import base64 as _tf_base64
            import io as _tf_io
            import json as _tf_json
            import tarfile as _tf_tarfile
            import tempfile as _tf_tempfile

            _TF_TOOL = {tool!r}
            _TF_FILES = _tf_json.loads({files!r})


            def _tf_archive(path, hostile):
                with _tf_tarfile.open(path, "w:gz") as tar:
                    def add(name, data=b"", mode=0o644, **kw):
                        info = _tf_tarfile.TarInfo(name)
                        info.size, info.mode = len(data), mode
                        for k, v in kw.items():
                            setattr(info, k, v)
                        tar.addfile(info, _tf_io.BytesIO(data) if info.isreg() else None)
                    for name, data in sorted(_TF_FILES.items()):
                        add(name, _tf_base64.b64decode(data), 0o755 if name.endswith(".bin") else 0o640)
                    for kind in hostile:
                        if kind == "dotdot":
                            add("../outside/escaped.txt", b"escaped")
                            add("data/../../outside/escaped2.txt", b"escaped")
                        elif kind == "absolute":
                            add(_tf_os.path.join(_tf_os.path.dirname(path), "outside", "absolute.txt"), b"abs")
                        elif kind == "symlink":
                            add("link", type=_tf_tarfile.SYMTYPE, linkname="../outside")
                            add("link/through-link.txt", b"through")
                        elif kind == "hardlink":
                            add("hard", type=_tf_tarfile.LNKTYPE, linkname="../outside/target.txt")
                        elif kind == "device":
                            add("dev-null", type=_tf_tarfile.CHRTYPE, devmajor=1, devminor=3)
                            add("fifo", type=_tf_tarfile.FIFOTYPE)


            def _tf_check(hostile):
                with _tf_tempfile.TemporaryDirectory() as tmp:
                    outside = _tf_os.path.join(tmp, "outside")
                    _tf_os.makedirs(outside)
                    with open(_tf_os.path.join(outside, "target.txt"), "wb") as fh:
                        fh.write(b"keep")
                    archive = _tf_os.path.join(tmp, "bundle.tar.gz")
                    _tf_archive(archive, hostile)
                    dest = _tf_os.path.join(tmp, "dest")
                    code, _, err = _tf_run([_TF_TOOL, archive, dest], cwd=tmp)
                    assert sorted(_tf_os.listdir(outside)) == ["target.txt"], f"{{hostile}}: wrote outside DEST"
                    with open(_tf_os.path.join(outside, "target.txt"), "rb") as fh:
                        assert fh.read() == b"keep", f"{{hostile}}: changed a file outside DEST"
                    assert code == 0, f"{{hostile}}: exit {{code}}: {{err[-300:]}}"
                    got = {{}}
                    for root, dirs, names in _tf_os.walk(dest):
                        for n in dirs + names:
                            p = _tf_os.path.join(root, n)
                            assert not _tf_os.path.islink(p), f"{{hostile}}: created a link {{p}}"
                            if _tf_os.path.isfile(p):
                                with open(p, "rb") as fh:
                                    got[_tf_os.path.relpath(p, dest)] = fh.read()
                    want = {{n: _tf_base64.b64decode(d) for n, d in _TF_FILES.items()}}
                    if "symlink" in hostile:  # the link is skipped, so this path stays inside DEST
                        want["link/through-link.txt"] = b"through"
                    assert got == want, f"{{hostile}}: extracted {{sorted(got)}}, expected {{sorted(want)}}"
                    for name in _TF_FILES:
                        mode = _tf_os.stat(_tf_os.path.join(dest, name)).st_mode & 0o777
                        assert mode == (0o755 if name.endswith(".bin") else 0o640), f"{{name}}: mode {{oct(mode)}}"
                    assert (hostile == []) or b"skipped" in err, f"{{hostile}}: no skipped line"


            def test_safe_extract_keeps_a_clean_archive_whole():
                _tf_check([])


            def test_safe_extract_never_writes_outside_dest():
                for hostile in (["dotdot"], ["absolute"], ["symlink"], ["hardlink"], ["device"],
                                ["dotdot", "symlink", "hardlink", "absolute", "device"]):
                    _tf_check(hostile)


            def test_safe_extract_rejects_a_damaged_archive():
                with _tf_tempfile.TemporaryDirectory() as tmp:
                    archive = _tf_os.path.join(tmp, "bundle.tar.gz")
                    _tf_archive(archive, [])
                    with open(archive, "rb") as fh:
                        data = fh.read()
                    with open(archive, "wb") as fh:
                        fh.write(data[: len(data) // 2])
                    code, _, _ = _tf_run([_TF_TOOL, archive, _tf_os.path.join(tmp, "dest")], cwd=tmp)
                    assert code != 0, "a damaged archive was accepted"
            ''').format(tool=self.tool, files=json.dumps(files, sort_keys=True)))


SERVE_RESULTS = '''
import http.server, os, sys

FILES = {os.path.basename(p): p for p in __OUTPUTS__}

def read(name):
    with open(FILES[name], "rb") as fh:
        return fh.read()

if sys.argv[1] == "--print":
    sys.stdout.buffer.write(read(sys.argv[2]))
    sys.exit(0)


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        name = self.path[len("/results/"):] if self.path.startswith("/results/") else None
        if name not in FILES:
            self.send_error(404)
            return
        body = read(name)
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[2])), Handler).serve_forever()
'''


class ServedResults(VerifierStrategy):
    kind = "multi_protocol"
    tool = f"{BIN}/serve-results"
    needs_container = False

    def applies(self, output_paths):
        names = [p.rsplit("/", 1)[-1] for p in output_paths]
        if not names:
            return "the task has no deliverable files to serve"
        if len(set(names)) != len(names):
            return "two deliverables share a file name"
        return None

    def deliverable(self, container, params):
        return (f"`{self.tool}`: an executable. `serve-results --print NAME` writes the deliverable whose file name "
                "is NAME to standard output; `serve-results --port PORT` serves every deliverable over HTTP on "
                "127.0.0.1:PORT at `/results/NAME` (404 for anything else) until it is stopped. Each deliverable "
                "is read from its file, from the command and over HTTP, and the three must agree.")

    def oracle(self, container, output_paths):
        return write_program(self.tool, SERVE_RESULTS.replace("__OUTPUTS__", repr(list(output_paths))))

    def final_tests(self, container, params, output_paths, rng, level):
        return FinalTests(RUN_TOOL + textwrap.dedent('''
            import time as _tf_time
            import urllib.error as _tf_urlerror
            import urllib.request as _tf_request

            _TF_TOOL = {tool!r}
            _TF_OUTPUTS = {outputs!r}


            def _tf_get(url, deadline):
                while True:
                    try:
                        with _tf_request.urlopen(url, timeout=10) as resp:
                            return resp.status, resp.read()
                    except _tf_urlerror.HTTPError as exc:
                        return exc.code, b""
                    except OSError:
                        if _tf_time.monotonic() > deadline:
                            raise
                        _tf_time.sleep(0.02)


            def test_every_deliverable_is_the_same_from_file_command_and_http():
                assert _tf_os.access(_TF_TOOL, _tf_os.X_OK), f"{{_TF_TOOL}} is missing or not executable"
                files = {{}}
                for path in _TF_OUTPUTS:
                    with open(path, "rb") as fh:
                        files[_tf_os.path.basename(path)] = fh.read()
                for name, data in files.items():
                    code, out, err = _tf_run([_TF_TOOL, "--print", name], timeout=60)
                    assert code == 0 and out == data, f"--print {{name}} differs from the file"
                port = _tf_free_port()
                server = _tf_subprocess.Popen([_TF_TOOL, "--port", str(port)], start_new_session=True,
                                              stdout=_tf_subprocess.DEVNULL, stderr=_tf_subprocess.DEVNULL)
                try:
                    deadline = _tf_time.monotonic() + 20
                    for name, data in files.items():
                        status, body = _tf_get(f"http://127.0.0.1:{{port}}/results/{{name}}", deadline)
                        assert status == 200 and body == data, f"HTTP /results/{{name}} differs from the file"
                    status, _ = _tf_get(f"http://127.0.0.1:{{port}}/results/not-a-deliverable", deadline)
                    assert status == 404, f"an unknown name answered {{status}}"
                finally:
                    _tf_stop(server)
            ''').format(tool=self.tool, outputs=list(output_paths)))


STRATEGIES: dict[str, VerifierStrategy] = {s.kind: s for s in (DecoderEquivalence(), DecoderScore(), HostileArchives(),
                                                                 ServedResults())}
