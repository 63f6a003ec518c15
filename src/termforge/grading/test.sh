#!/bin/bash
# Harbor verifier entry point of a termforge task: writes 1 to /logs/verifier/reward.txt when every
# final-state test passes, else 0 (docs/grading.md, "Exported Harbor tasks"). The tests run
# programs the agent wrote, so:
# - reward.json and reward.txt are removed before and after the tests, and the reward is written
#   last, from this run's own result (Harbor reads reward.json first: a program the tests ran must
#   not leave one behind);
# - the test file is copied to a private directory and deleted from /tests before pytest starts,
#   and the private copy is deleted once collected, so programs cannot read the expected values;
# - pytest runs under `python3 -I` (no cwd, user site or PYTHON* variables on sys.path), in
#   importlib mode, plugin autoload off, with rootdir and confcutdir the private directory (no
#   conftest.py, pytest.ini or sitecustomize.py planted in /app, /tmp or / is ever loaded), and it
#   is non-dumpable and a child subreaper: every process the tests started is killed before the
#   reward is written.
# termforge never trusts this file's reward for its own tasks: its grader reports to the host over
# a private channel.
out=/logs/verifier
[ -L "$out" ] && rm -f -- "$out"
mkdir -p "$out" && chmod u+rwx "$out" 2>/dev/null
rm -rf -- "$out/reward.json" "$out/reward.txt"
py=/usr/bin/python3
[ -x "$py" ] || py=python3
priv=$(mktemp -d /tmp/tf-tests.XXXXXXXXXX) || { echo 0 > "$out/reward.txt"; exit 0; }
chmod 700 "$priv"
if ! cp /tests/test_final_state.py "$priv/test_final_state.py"; then
  rm -rf -- "$priv" "$out/reward.json" "$out/reward.txt"
  echo 0 > "$out/reward.txt"
  exit 0
fi
rm -f /tests/test_final_state.py 2>/dev/null
cd "$priv" || exit 1
runner=$(cat <<'PY'
import ctypes, os, signal, sys, time
libc = ctypes.CDLL(None)
libc.prctl(4, 0, 0, 0, 0)   # PR_SET_DUMPABLE 0: no ptrace or /proc/<pid>/mem for programs
libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: daemons the tests start stay our descendants
import pytest

priv = sys.argv[1]


class Grade:
    def __init__(self):
        self.collected, self.outcomes = [], {}

    def pytest_collection_modifyitems(self, session, config, items):
        self.collected = [item.nodeid for item in items]

    def pytest_collection_finish(self, session):
        for path in {str(item.path) for item in session.items}:
            if path.startswith(priv + "/"):
                try:
                    os.unlink(path)
                except OSError:
                    pass

    def pytest_runtest_logreport(self, report):
        rank = {"passed": 0, "skipped": 1, "failed": 2}
        state = "failed" if report.failed else "skipped" if report.skipped else "passed" if report.when == "call" else None
        if state and rank[state] >= rank.get(self.outcomes.get(report.nodeid), -1):
            self.outcomes[report.nodeid] = state


def descendants(me):
    table = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    rest = f.read().rpartition(")")[2].split()
                table[int(name)] = (int(rest[1]), rest[0])
            except (OSError, IndexError, ValueError):
                pass
    out = []
    for pid, (ppid, state) in table.items():
        p, n = ppid, 0
        while p in table and p != me and n < 100000:
            p, n = table[p][0], n + 1
        if p == me and pid != me and state not in "ZX":
            out.append(pid)
    return out


def stop_leftovers():
    me = os.getpid()
    for _ in range(1000):
        alive = True
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                alive = False
                break
            if pid == 0:
                break
        found = descendants(me)
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if not found and not alive:
            return
        time.sleep(0.002)


grade = Grade()
pytest.main(["-q", "-p", "no:cacheprovider", "--import-mode=importlib", "--rootdir=" + priv,
             "--confcutdir=" + priv, priv + "/test_final_state.py"], plugins=[grade])
stop_leftovers()
ok = bool(grade.collected) and all(grade.outcomes.get(n) == "passed" for n in grade.collected)
sys.exit(0 if ok else 1)
PY
)
env -u PYTHONPATH -u PYTHONHOME -u PYTEST_ADDOPTS -u PYTEST_PLUGINS PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 \
  "$py" -I -c "$runner" "$priv"
status=$?
cd / && rm -rf -- "$priv"
# Whatever the tests' programs did to the reward directory (replaced it by a symlink, took away
# its write permission, left reward files, directories or FIFOs there) is undone before writing.
[ -L "$out" ] && rm -f -- "$out"
mkdir -p "$out" && chmod u+rwx "$out" 2>/dev/null
rm -rf -- "$out/reward.json" "$out/reward.txt"
if [ "$status" -eq 0 ]; then
  echo 1 > "$out/reward.txt"
else
  echo 0 > "$out/reward.txt"
fi
exit 0
