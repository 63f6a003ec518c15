"""termforge's grader, run inside a verifier sandbox as `python3 -I /verifier/grade.py`
(docs/grading.md). Standard library and pytest only: it runs on the image's python3.

    grade.py TEST...             the grader: termforge's own tasks, as the sandbox's first process
    grade.py --supervise CMD...  Harbor tasks: holds the grade channel, runs CMD (test.sh) without
                                 it, and runs the grader (a fork of itself, never an exec) when
                                 /verifier/run-tests asks, on the tests under /tests
    grade.py --request ARG...    /verifier/run-tests: asks the supervisor to grade ARG..., relays
                                 the grader's exit status

The channel (termforge.grading.grader): the host hands the first process a *boot* socket (its number in
TERMFORGE_GRADER_FD); that process makes itself non-dumpable before anything else (so
/proc/<pid>/fd, /proc/<pid>/mem, ptrace and pidfd_getfd are closed to the same uid), says hello,
and gets a *private* socket, both close-on-exec, so no program a test (or test.sh) starts ever
holds either. The grader sends one verdict on the private socket; the supervisor one report.
"""

import ctypes
import os
import sys

PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
GRADER_FD_ENV = "TERMFORGE_GRADER_FD"
REQUEST_FD_ENV = "TERMFORGE_RUN_TESTS_FD"
HELLO = b"termforge-grader-hello"
TESTS_ROOT = "/tests"
# pytest options that only change what is printed: accepted from test.sh and passed on; any
# other option a test.sh gives run-tests is dropped (it could change what is collected or how).
DISPLAY_OPTIONS = {"-q", "-v", "-vv", "-vvv", "-s", "-rA", "-ra", "-rf", "-rN", "--tb=short", "--tb=long",
                   "--tb=line", "--tb=no", "--tb=native", "--no-header", "--color=no", "--color=yes"}
PYTEST_ARGS = ["-p", "no:cacheprovider", "--import-mode=importlib", "--rootdir=" + TESTS_ROOT,
               "--confcutdir=" + TESTS_ROOT]
REFUSED = 99  # run-tests' exit status when the supervisor refuses a second grader


def _prctl(option, arg):
    return ctypes.CDLL(None, use_errno=True).prctl(option, arg, 0, 0, 0)


# -- the channel ----------------------------------------------------------------------------------

def take_channel():
    """Say hello on the boot socket and return the private socket the host answers with (None
    when no boot socket was given: a run outside termforge's verifier)."""
    import array
    import socket

    fd = os.environ.pop(GRADER_FD_ENV, None)
    if fd is None:
        return None
    boot = socket.socket(fileno=int(fd))
    boot.set_inheritable(False)
    boot.sendmsg([HELLO])
    fds = array.array("i")
    _, anc, _, _ = boot.recvmsg(64, socket.CMSG_SPACE(fds.itemsize))
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    for extra in fds[1:]:
        os.close(extra)
    boot.close()
    if not fds:
        sys.exit(3)
    os.set_inheritable(fds[0], False)
    return socket.socket(fileno=fds[0])


def send(channel, message):
    import json

    if channel is not None:
        channel.sendall(json.dumps(message).encode())


# -- the grader -----------------------------------------------------------------------------------

class Proof:
    """What pytest collected and each test's outcome (the worst of its phases)."""

    def __init__(self):
        self.collected = []
        self.outcomes = {}

    def pytest_collection_modifyitems(self, session, config, items):
        self.collected = [item.nodeid for item in items]

    def pytest_collection_finish(self, session):
        # Programs the tests start must not read the expected values from the test files (on the
        # Harbor path /tests is read-only and stays: Harbor leaves it in place too).
        for path in {str(item.path) for item in session.items}:
            if path.startswith(TESTS_ROOT + "/"):
                try:
                    os.unlink(path)
                except OSError:
                    pass

    def pytest_runtest_logreport(self, report):
        rank = {"passed": 0, "skipped": 1, "failed": 2}
        if report.failed:
            state = "failed"
        elif report.skipped:
            state = "skipped"
        elif report.when == "call":
            state = "passed"
        else:
            return
        old = self.outcomes.get(report.nodeid)
        if old is None or rank[state] > rank[old]:
            self.outcomes[report.nodeid] = state


def _proc_table():
    """pid -> (parent pid, state, command name) of every process this pid namespace shows."""
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                # A command name is whatever bytes the process chose: data, never a decoding error.
                text = f.read().decode("utf-8", "backslashreplace")
        except OSError:
            continue
        head, _, rest = text.rpartition(")")
        fields = rest.split()
        try:
            table[int(name)] = (int(fields[1]), fields[0], head.partition("(")[2][:40])
        except (IndexError, ValueError):
            continue
    return table


def _descendants(me):
    table = _proc_table()
    out = []
    for pid, (ppid, state, comm) in table.items():
        if pid == me or state in "ZX":
            continue
        seen, p = 0, ppid
        while p in table and p != me and seen < 100000:
            p, seen = table[p][0], seen + 1
        if p == me:
            out.append((pid, comm))
    return out


def _reap():
    """Reap exited children; returns ({pid: wait status} of those reaped, whether a child lives)."""
    reaped = {}
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return reaped, False
        if pid == 0:
            return reaped, True
        reaped[pid] = status


def leftovers():
    """Processes the tests started that are still alive: named, then killed. The grader is a child
    subreaper whose only child of its own is the pytest process, which has exited by now: every
    process still its child or below it is something the tests started (a daemon that
    double-forked or called setsid, a fork-hopper whose pid keeps changing). It keeps killing
    until it has no child at all."""
    import signal
    import time

    me, names, seen, unnamed = os.getpid(), [], set(), 0
    for _ in range(2000):
        _, alive = _reap()
        found = _descendants(me)
        for pid, comm in found:
            if pid not in seen:
                seen.add(pid)
                names.append(comm)
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if not alive and not found:
            return names
        unnamed = unnamed + 1 if alive and not found else 0
        if unnamed == 50 and not names:
            names.append("(a process that changed its pid as it was looked at)")
        time.sleep(0.002)
    return names + ["(processes that kept forking past every kill)"]


def pytest_argv(args):
    """pytest's arguments for grading `args` (paths under /tests and display options), or None
    where no path is given."""
    options = [a for a in args if a.startswith("-")]
    paths = [a for a in args if not a.startswith("-")]
    return ["-q", *options, *PYTEST_ARGS, *paths] if paths else None


# Made ahead by the grader zygote (grading/zygote.py), per pytest argument list: what
# pytest.main's get_config() builds from the arguments alone (a plugin manager with pytest's own
# plugins registered and their options added), before any grade's file is looked at.
PREPARED = {}
PREPARED_MAX = 8


def prepare(args):
    """In the zygote: make ahead get_config()'s part of grading `args` (what it makes is frozen out
    of the garbage collector, as the zygote's imports are); whether it is made. It reads no file
    and no environment variable but PYTEST_DEBUG (with which nothing is made ahead)."""
    argv = pytest_argv(args)
    if argv is None:
        return False
    key = tuple(argv)
    if key not in PREPARED and len(PREPARED) < PREPARED_MAX and not os.environ.get("PYTEST_DEBUG"):
        import gc

        from _pytest.config import get_config

        PREPARED[key] = get_config(list(argv))
        gc.freeze()
    return key in PREPARED


def _use_prepared(argv):
    """Where the zygote made `argv`'s config ahead: pytest.main's get_config(argv, plugins) returns
    it, with the invocation parameters get_config itself gives (the arguments, the plugins, the
    current directory), once; every other call is pytest's own."""
    made = PREPARED.pop(tuple(argv), None)
    if made is None or os.environ.get("PYTEST_DEBUG"):
        return
    import pathlib

    import _pytest.config as pytest_config

    own = pytest_config.get_config

    def get_config(args=None, plugins=None):
        nonlocal made
        if made is None or args is None or list(args) != argv:
            return own(args, plugins)
        config, made = made, None
        config.invocation_params = pytest_config.Config.InvocationParams(
            args=args or (), plugins=plugins, dir=pathlib.Path.cwd())
        return config

    pytest_config.get_config = get_config


def run_pytest(args):
    """pytest on `args` in this process (the grader's pytest child): what it collected and each
    test's outcome."""
    import pytest

    proof = Proof()
    argv = pytest_argv(args)
    if argv is not None:
        _use_prepared(argv)
    code = pytest.main(argv, plugins=[proof]) if argv is not None else 4
    return {"collected": proof.collected, "outcomes": proof.outcomes, "exitstatus": int(code)}


def _runner(channel, args, write_end):
    """The pytest child: never returns."""
    import json

    code = 3
    try:
        if channel is not None:
            channel.close()
        view = memoryview(json.dumps(run_pytest(args)).encode())
        while view:
            view = view[os.write(write_end, view):]
        code = 0
    except BaseException:  # noqa: BLE001 - the grader reports a runner that failed
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def grade(channel, args, ignored=()):
    """Grade `args` (paths under /tests) and send the verdict on the channel.

    This process is a child subreaper that only watches: pytest runs in a fork of it (the same
    non-dumpable image, never an exec), which pipes back what it saw; every process the tests
    leave behind is reparented here, reaped as it exits (a fork-hopper's dead hops never pile up
    against the process limit) and killed once pytest is done."""
    import json
    import select

    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    for key in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS"):
        os.environ.pop(key, None)
    sys.dont_write_bytecode = True  # no __pycache__ copy of the tests
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    read_end, write_end = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    runner = os.fork()
    if runner == 0:
        os.close(read_end)
        _runner(channel, args, write_end)
    os.close(write_end)
    buf, status = b"", None
    while status is None:
        ready, _, _ = select.select([read_end], [], [], 0.05)
        if ready:
            buf += os.read(read_end, 1 << 16)
        reaped, _ = _reap()
        status = reaped.get(runner, status)
    os.set_blocking(read_end, False)
    try:
        while chunk := os.read(read_end, 1 << 16):
            buf += chunk
    except BlockingIOError:
        pass
    os.close(read_end)
    left = leftovers()
    try:
        result = json.loads(buf.decode()) if buf else None
    except ValueError:
        result = None
    if not isinstance(result, dict):
        # The pytest child was killed (by a program the tests ran) before it reported.
        verdict = {"collected": [], "outcomes": {}, "exitstatus": -1, "leftover": left, "died": True}
        if os.WIFSIGNALED(status):
            verdict["signal"] = os.WTERMSIG(status)
        send(channel, {"kind": "verdict", **verdict})
        print("\ntermforge grader: pytest ended without a result", flush=True)
        return 1
    collected, outcomes = list(result.get("collected") or []), dict(result.get("outcomes") or {})
    ok = bool(collected) and all(outcomes.get(n) == "passed" for n in collected)
    send(channel, {"kind": "verdict", "collected": collected, "outcomes": outcomes,
                   "exitstatus": result.get("exitstatus", -1), "leftover": left, "ignored_args": list(ignored)})
    passed = sum(v == "passed" for v in outcomes.values())
    print(f"\ntermforge grader: {passed}/{len(collected)} passed", flush=True)
    return 0 if ok else 1


def request_args(args):
    """What a run-tests request may grade: test paths that exist under /tests (read-only there,
    so the pristine tests) and display-only options. Everything else is dropped and reported."""
    keep, ignored = [], []
    for a in args:
        if a.startswith("-"):
            (keep if a in DISPLAY_OPTIONS else ignored).append(a)
            continue
        real = os.path.realpath(a)
        if (real == TESTS_ROOT or real.startswith(TESTS_ROOT + "/")) and os.path.exists(real):
            keep.append(real)
        else:
            ignored.append(a)
    if not any(not a.startswith("-") for a in keep) and not ignored:
        keep.append(TESTS_ROOT)
    return keep, ignored


# -- the supervisor (Harbor tasks) ----------------------------------------------------------------

def supervise(channel, command):
    """Run `command` (test.sh) with a request socket but never the channel; grade at most once,
    when asked; then report to the host how it went and exit with the command's status."""
    import array
    import json
    import select
    import socket
    import subprocess

    requests_mine, requests_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    env = dict(os.environ, **{REQUEST_FD_ENV: str(requests_theirs.fileno())})
    cwd = os.getcwd()
    try:
        child = subprocess.Popen(command, env=env, pass_fds=(requests_theirs.fileno(),))
    except OSError as exc:
        print(f"termforge supervisor: cannot run {command[:1]}: {exc}", file=sys.stderr)
        send(channel, {"kind": "supervisor", "command_exit": 127, "requests": 0, "grader": None})
        return 127
    requests_theirs.close()
    n_requests, grader_pid, grader, reply, command_status = 0, None, None, None, None
    launched, listening = False, True
    while command_status is None or grader_pid is not None:
        if listening:
            ready, _, _ = select.select([requests_mine], [], [], 0.05)
        else:
            ready = []
            select.select([], [], [], 0.05)
        if ready:
            fds = array.array("i")
            try:
                msg, anc, _, _ = requests_mine.recvmsg(65536, socket.CMSG_SPACE(8 * fds.itemsize))
            except OSError:
                msg, anc = b"", []
            for level, kind, data in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
            if not msg and not fds:
                listening = False  # every holder of the request socket is gone
            else:
                n_requests += 1
                try:
                    args = [str(a) for a in json.loads(msg.decode())["args"]]
                except (ValueError, KeyError, TypeError, UnicodeDecodeError):
                    args = None
                # One grader per verification; a malformed request never uses that one up.
                if launched or args is None or len(fds) != 4:
                    if len(fds) == 4:
                        try:
                            os.write(fds[3], bytes([REFUSED]))
                        except OSError:
                            pass
                    for fd in fds:
                        os.close(fd)
                else:
                    sys.stdout.flush()
                    sys.stderr.flush()
                    pid = os.fork()
                    if pid == 0:  # the grader: this same non-dumpable process, never exec'd
                        code = 3
                        try:
                            requests_mine.close()
                            for target, fd in enumerate(fds[:3]):
                                os.dup2(fd, target)
                            for fd in fds:
                                if fd > 2:
                                    os.close(fd)
                            os.chdir(cwd)
                            keep, ignored = request_args(args)
                            code = grade(channel, keep, ignored)
                        except BaseException:  # noqa: BLE001 - report, then exit
                            import traceback

                            traceback.print_exc()
                        finally:
                            sys.stdout.flush()
                            sys.stderr.flush()
                            os._exit(code)
                    grader_pid, reply, launched = pid, fds[3], True
                    for fd in fds[:3]:
                        os.close(fd)
        if grader_pid is not None:
            pid, status = os.waitpid(grader_pid, os.WNOHANG)
            if pid:
                grader = ({"signal": os.WTERMSIG(status)} if os.WIFSIGNALED(status)
                          else {"exit": os.waitstatus_to_exitcode(status)})
                try:
                    os.write(reply, bytes([grader.get("exit", 128 + grader.get("signal", 0)) & 255]))
                except OSError:
                    pass
                os.close(reply)
                grader_pid = reply = None
        if command_status is None:
            pid, status = os.waitpid(child.pid, os.WNOHANG)
            if pid:
                command_status = os.waitstatus_to_exitcode(status)
    send(channel, {"kind": "supervisor", "command_exit": command_status, "requests": n_requests,
                   "grader": grader})
    return command_status if command_status >= 0 else 128 - command_status


# -- run-tests ------------------------------------------------------------------------------------

def request(args):
    """Ask the supervisor to run the grader on `args`; exit with the grader's status."""
    import array
    import json
    import socket

    fd = os.environ.get(REQUEST_FD_ENV)
    if fd is None:
        print("run-tests: no termforge grader supervisor in this sandbox", file=sys.stderr)
        return 4
    try:
        supervisor = socket.socket(fileno=int(fd))
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        sys.stdout.flush()
        supervisor.sendmsg([json.dumps({"args": list(args)}).encode()],
                           [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [0, 1, 2, theirs.fileno()]))])
        theirs.close()
        answer = mine.recv(16)
    except (OSError, ValueError) as exc:
        print(f"run-tests: the grader supervisor cannot be reached: {exc}", file=sys.stderr)
        return 4
    if not answer:
        print("run-tests: the grader supervisor went away", file=sys.stderr)
        return 4
    if answer[0] == REFUSED:
        print("run-tests: the grader already ran in this verification", file=sys.stderr)
    return answer[0]


def main(argv):
    if argv[:1] == ["--request"]:
        return request(argv[1:])
    # Before anything else: no /proc/<pid>/mem, /proc/<pid>/fd or ptrace for same-uid processes.
    _prctl(PR_SET_DUMPABLE, 0)
    channel = take_channel()
    if argv[:1] == ["--supervise"]:
        command = argv[1:]
        if command[:1] == ["--"]:
            command = command[1:]
        return supervise(channel, command)
    return grade(channel, argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
