"""Where the time goes: wall and CPU seconds charged to the step that spent them, sandboxes
included (bench/bench_validate.py and the report's validation-cost table).

A `Meter` is made current for a step (`metering(meter)`); while it is, the CPU the step's thread
spends, the CPU of the helper threads it starts (`start_thread`: output readers, the disk watch,
the grader channel) and the CPU of every sandbox it runs are added to it.

A sandbox's CPU cannot be read from `getrusage(RUSAGE_CHILDREN)`: bwrap's monitor exits without
reaping the sandbox's pid 1, so the CPU of everything inside is never charged to its parent
(measured: a sandboxed `python3` busy for 0.5 s shows 0.002 s there). So each sandbox runs in a
cgroup of its own, made under the caller's own cgroup (v2, else v1 cpuacct), and its usage is
read once the sandbox is gone. Where no cgroup can be made (not root and nothing delegated), the
sandbox's CPU is counted as unmeasured (`Meter.unmeasured`) rather than guessed.
"""

from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Callable

_current: ContextVar["Meter | None"] = ContextVar("termforge_meter", default=None)


class Meter:
    """CPU seconds charged while current: the host's (threads) and the sandboxes'."""

    def __init__(self) -> None:
        self.host = 0.0
        self.sandbox = 0.0
        self.sandboxes = 0
        self.unmeasured = 0
        self._lock = threading.Lock()

    def add_host(self, seconds: float) -> None:
        with self._lock:
            self.host += max(0.0, seconds)

    def add_sandbox(self, seconds: float | None) -> None:
        with self._lock:
            self.sandboxes += 1
            if seconds is None:
                self.unmeasured += 1
            else:
                self.sandbox += max(0.0, seconds)

    @property
    def cpu(self) -> float:
        return self.host + self.sandbox


def current() -> Meter | None:
    return _current.get()


@contextmanager
def metering(meter: Meter):
    """Charge what this thread (and what it starts) spends to `meter`."""
    token = _current.set(meter)
    t0 = time.thread_time()
    try:
        yield meter
    finally:
        meter.add_host(time.thread_time() - t0)
        _current.reset(token)


def charge_sandbox(seconds: float | None) -> None:
    meter = _current.get()
    if meter is not None:
        meter.add_sandbox(seconds)


def start_thread(target: Callable, *args) -> threading.Thread:
    """A daemon thread whose CPU is charged to the meter current where it was started."""
    meter = _current.get()

    def run() -> None:
        t0 = time.thread_time()
        try:
            target(*args)
        finally:
            if meter is not None:
                meter.add_host(time.thread_time() - t0)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


# -- cgroups ----------------------------------------------------------------------------------------

_CG_LOCK = threading.Lock()
_CG_STATE: dict = {}
_COUNTER = iter(range(1, 1 << 62))


def _mounts() -> list[tuple[str, str, str]]:
    """(mount point, fstype, super options) of every cgroup mount."""
    out = []
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                fields, rfields = left.split(), right.split()
                if len(fields) > 4 and len(rfields) > 2 and rfields[0] in ("cgroup", "cgroup2"):
                    out.append((fields[4], rfields[0], rfields[2]))
    except OSError:
        pass
    return out


def own_cgroup_dir() -> tuple[Path, str] | None:
    """The directory of this process's own cgroup and its kind ("v2" or "v1"), where one can be
    made below it; read afresh each call (a caller may move itself between cgroups)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    mounts = _mounts()
    candidates: list[tuple[Path, str]] = []
    for line in lines:
        hier, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hier == "0" and not controllers:
            for point, fstype, _ in mounts:
                if fstype == "cgroup2":
                    candidates.append((Path(point + path), "v2"))
        elif "cpuacct" in controllers.split(","):
            for point, fstype, opts in mounts:
                if fstype == "cgroup" and "cpuacct" in opts.split(","):
                    candidates.append((Path(point + path), "v1"))
    for d, kind in candidates:
        if d.is_dir() and os.access(d, os.W_OK | os.X_OK):
            return d, kind
    return None


class SandboxCgroup:
    """A cgroup for one sandbox: `join` (in the child, before exec) moves the process into it;
    `finish` waits for its processes to be gone and returns the CPU seconds they used."""

    def __init__(self, path: Path, kind: str):
        self.path, self.kind = path, kind

    def join(self) -> None:
        """In the sandbox's child before exec. Never raises: a sandbox that could not join runs
        all the same, and its CPU reads as unmeasured (usage() is None for an unused cgroup)."""
        # v1: the child, still one thread, moves that thread (`tasks`): the kernel then skips the
        # global lock a whole process's move takes, and with it a wait for an RCU grace period
        # (about 10 ms of the sandbox's start, measured with perf sched_switch); v2 has no such file.
        try:
            with open(self.path / ("tasks" if self.kind == "v1" else "cgroup.procs"), "w") as f:
                f.write("0")
        except OSError:
            pass

    def _empty(self) -> bool:
        try:
            return not (self.path / "cgroup.procs").read_text().strip()
        except OSError:
            return True

    def usage(self) -> float | None:
        """CPU seconds used in the cgroup; None where unreadable or where nothing ever ran in it
        (a process that runs uses some CPU: zero means the sandbox never joined)."""
        try:
            if self.kind == "v2":
                for line in (self.path / "cpu.stat").read_text().splitlines():
                    if line.startswith("usage_usec"):
                        return int(line.split()[1]) / 1e6 or None
                return None
            return int((self.path / "cpuacct.usage").read_text()) / 1e9 or None
        except (OSError, ValueError):
            return None

    def finish(self, wait: float = 2.0) -> float | None:
        """CPU seconds used inside; the sandbox's last processes (its orphaned pid 1) may still be
        exiting when bwrap has returned, so wait for the cgroup to empty first."""
        deadline = time.monotonic() + wait
        while not self._empty() and time.monotonic() < deadline:
            time.sleep(0.002)
        used = self.usage()
        for _ in range(200):
            try:
                os.rmdir(self.path)
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.005)
        return used


def sandbox_cgroup() -> SandboxCgroup | None:
    """A fresh cgroup below this process's own, or None where none can be made (then sandbox
    CPU is unmeasured). TERMFORGE_CPU_ACCOUNTING=0 turns the cgroups off."""
    if os.environ.get("TERMFORGE_CPU_ACCOUNTING", "1") == "0":
        return None
    with _CG_LOCK:
        if _CG_STATE.get("broken"):
            return None
        n = next(_COUNTER)
    found = own_cgroup_dir()
    if found is None:
        return None
    base, kind = found
    path = base / f"tf-sandbox-{os.getpid()}-{n}"
    try:
        path.mkdir()
    except OSError:
        with _CG_LOCK:
            _CG_STATE["broken"] = True
        return None
    return SandboxCgroup(path, kind)




# -- per-step profiles ------------------------------------------------------------------------------

class StepProfile:
    """Count, wall and CPU seconds (host threads + sandboxes) per named step, summed over every
    task that ran it (validation's per-step profile: the validate stage's `--profile` file, the
    report's table, bench/bench_validate.py). Safe to share between worker threads."""

    def __init__(self) -> None:
        self.steps: dict[str, dict] = {}
        self._lock = threading.Lock()

    @contextmanager
    def step(self, name: str):
        meter = Meter()
        t0 = time.monotonic()
        try:
            with metering(meter):
                yield meter
        finally:
            wall = time.monotonic() - t0
            with self._lock:
                row = self.steps.setdefault(name, {"count": 0, "wall_s": 0.0, "cpu_s": 0.0, "host_cpu_s": 0.0,
                                                   "sandboxes": 0, "cpu_unmeasured_sandboxes": 0})
                row["count"] += 1
                row["wall_s"] += wall
                row["cpu_s"] += meter.cpu
                row["host_cpu_s"] = row.get("host_cpu_s", 0.0) + meter.host
                row["sandboxes"] += meter.sandboxes
                row["cpu_unmeasured_sandboxes"] += meter.unmeasured

    def merge(self, other: "StepProfile | dict") -> None:
        steps = other.steps if isinstance(other, StepProfile) else other
        with self._lock:
            for name, r in steps.items():
                row = self.steps.setdefault(name, {k: 0 if isinstance(v, int) else 0.0 for k, v in r.items()})
                for k, v in r.items():
                    row[k] = row.get(k, 0) + v

    def to_dict(self) -> dict:
        with self._lock:
            return {name: {k: round(v, 4) if isinstance(v, float) else v for k, v in r.items()}
                    for name, r in self.steps.items()}


def profile_table(steps: dict[str, dict]) -> list[dict]:
    """Rows of a per-step profile with each step's share of the total CPU and wall, largest CPU
    first, and a `total` row last."""
    cpu_total = sum(r["cpu_s"] for r in steps.values()) or 1e-12
    wall_total = sum(r["wall_s"] for r in steps.values()) or 1e-12
    rows = [{"step": name, "count": r["count"], "wall_s": r["wall_s"], "cpu_s": r["cpu_s"],
             "host_cpu_s": r.get("host_cpu_s", 0.0),
             "cpu_share": r["cpu_s"] / cpu_total, "wall_share": r["wall_s"] / wall_total,
             "sandboxes": r.get("sandboxes", 0), "cpu_unmeasured_sandboxes": r.get("cpu_unmeasured_sandboxes", 0)}
            for name, r in steps.items()]
    rows.sort(key=lambda r: -r["cpu_s"])
    rows.append({"step": "total", "count": sum(r["count"] for r in rows), "wall_s": sum(r["wall_s"] for r in rows),
                 "cpu_s": sum(r["cpu_s"] for r in rows), "host_cpu_s": sum(r["host_cpu_s"] for r in rows),
                 "cpu_share": 1.0, "wall_share": 1.0,
                 "sandboxes": sum(r["sandboxes"] for r in rows),
                 "cpu_unmeasured_sandboxes": sum(r["cpu_unmeasured_sandboxes"] for r in rows)})
    return rows


def format_profile(steps: dict[str, dict]) -> str:
    lines = [f"{'step':24} {'count':>6} {'wall s':>9} {'CPU s':>9} {'of it host':>10} {'CPU share':>9} "
             f"{'sandboxes':>9}"]
    for r in profile_table(steps):
        lines.append(f"{r['step']:24} {r['count']:>6} {r['wall_s']:>9.2f} {r['cpu_s']:>9.2f} {r['host_cpu_s']:>10.2f} "
                     f"{100 * r['cpu_share']:>8.1f}% {r['sandboxes']:>9}")
    return "\n".join(lines)


__all__ = ["Meter", "metering", "current", "charge_sandbox", "start_thread", "SandboxCgroup", "sandbox_cgroup",
           "own_cgroup_dir", "StepProfile", "profile_table", "format_profile"]
