"""The bwrap sandbox: no network, no writes outside the task layer, no host /root, real exit
codes, and limits that kill (wall clock, CPU time, memory)."""

import json
import os
import tempfile
from pathlib import Path

import pytest

from conftest import needs_bwrap
from termforge.runtime.base import Limits
from termforge.images.runtimes import BwrapRuntime

pytestmark = needs_bwrap


def _task(tmp_path: Path, setup: str, task_id: str = "tf-sandbox") -> Path:
    d = tmp_path / task_id
    (d / "environment" / "fixtures").mkdir(parents=True)
    (d / "environment" / "setup.sh").write_text("#!/bin/bash\nset -e\n" + setup + "\n")
    (d / "task.json").write_text(json.dumps({"id": task_id, "environment": {"apt_packages": []}}))
    return d


@pytest.fixture
def session(tmp_path):
    rt = BwrapRuntime()
    built = rt.build(_task(tmp_path, "echo hello > /app/greeting.txt"), tmp_path / "images")
    assert built.ok, built.reason
    with rt.start(built.image, Limits(wall_sec=20, cpu_sec=10, memory_mb=512)) as s:
        yield s


def test_layer_is_built_and_private(session):
    res = session.exec("cat /app/greeting.txt && id -u")
    assert res.ok and res.stdout.split() == ["hello", "1000"]


def test_real_exit_code(session):
    assert session.exec("exit 7").exit_code == 7


def test_no_network(session):
    res = session.exec("python3 -c 'import socket; socket.create_connection((\"1.1.1.1\", 80), timeout=3)'")
    assert res.exit_code != 0
    assert "Network is unreachable" in res.stderr or "OSError" in res.stderr


def test_cannot_write_outside_layer(session, tmp_path):
    for target in ("/usr/evil", "/etc/evil", "/evil-root-file"):
        res = session.exec(f"echo x > {target}")
        assert res.exit_code != 0, target
    # /tmp inside is a private tmpfs: nothing reaches the host's /tmp.
    marker = f"tf-escape-{os.getpid()}"
    assert session.exec(f"echo x > /tmp/{marker}").ok
    assert not Path("/tmp", marker).exists()
    assert session.exec("echo y > /app/new.txt").ok


def test_host_root_home_is_invisible(session):
    # The image's own /root (empty, mode 700) is there; nothing of the host's.
    marker = Path.home() / f".tf-host-marker-{os.getpid()}"
    marker.write_text("host secret")
    try:
        res = session.exec(f"cat /root/{marker.name} {marker}; ls -A /root")
        assert res.exit_code != 0 and "host secret" not in res.stdout
    finally:
        marker.unlink()


def test_capabilities_dropped(session):
    res = session.exec("grep CapEff /proc/self/status")
    assert res.stdout.split()[1] == "0000000000000000"


def test_wall_clock_timeout_is_reported(session):
    res = session.exec("sleep 30", timeout=1.0)
    assert res.timed_out and res.exit_code == 124
    assert res.duration_sec < 10


def test_cpu_limit_kills_busy_loop(session):
    res = session.exec("python3 -c 'while True: pass'", timeout=30)
    assert not res.timed_out and res.exit_code != 0  # SIGXCPU/SIGKILL from RLIMIT_CPU


def test_memory_limit(session):
    res = session.exec("python3 -c 'b = bytearray(1024 * 1024 * 1024)'")
    assert res.exit_code != 0 and "MemoryError" in res.stderr


def test_setup_writing_outside_layer_fails_build(tmp_path):
    rt = BwrapRuntime()
    res = rt.build(_task(tmp_path, "echo x > /etc/hacked"), tmp_path / "images")
    assert not res.ok and "outside the task layer" in res.reason
    res = rt.build(_task(tmp_path, "echo x > /tmp/stash; echo y > /app/ok", "tf-tmpwrite"), tmp_path / "images")
    assert not res.ok and "/tmp/stash" in res.reason


def test_setup_sh_is_held_to_one_disk_cap_and_its_odd_names_are_data(tmp_path):
    """Issue 39: setup.sh is task code. What it writes to /dev/shm counts against the build's
    disk_mb like the layer, a file it leaves there is named in the reason, and names that are
    not UTF-8 in the layer it makes (files, symlink targets) build and are digested as data."""
    rt = BwrapRuntime()
    limits = Limits(wall_sec=60, cpu_sec=60, disk_mb=32)
    fill = rt.build(_task(tmp_path, "for i in $(seq 12); do head -c 8M /dev/zero > /dev/shm/f$i; done",
                          "tf-shmfill"), tmp_path / "images", limits=limits)
    assert not fill.ok and "disk" in fill.reason, fill.reason
    left = rt.build(_task(tmp_path, "echo x > /dev/shm/stash; echo y > /app/ok", "tf-shmwrite"), tmp_path / "images")
    assert not left.ok and "/dev/shm/stash" in left.reason
    odd = "$(printf '\\xff\\xfe')"
    built = rt.build(_task(tmp_path, f": > /app/{odd}; ln -s /{odd}/x /app/l{odd}; mkdir /app/d{odd}", "tf-odd"),
                     tmp_path / "images")
    assert built.ok, built.reason
    assert os.fsdecode(b"\xff\xfe") in os.listdir(built.image.path / "layer")


def test_build_is_content_addressed(tmp_path):
    rt = BwrapRuntime()
    task = _task(tmp_path, "date +%s%N > /app/stamp")
    first = rt.build(task, tmp_path / "images")
    second = rt.build(task, tmp_path / "images")
    assert first.ok and second.cached and not first.cached
    (task / "environment" / "setup.sh").write_text("#!/bin/bash\necho changed > /app/stamp\n")
    third = rt.build(task, tmp_path / "images")
    assert third.ok and not third.cached


def test_missing_debian_package_fails_build_with_reason(tmp_path):
    task = _task(tmp_path, "true", "tf-needs-pkg")
    (task / "task.json").write_text(json.dumps({"id": "tf-needs-pkg",
                                                "environment": {"apt_packages": ["no-such-package-xyz"]}}))
    res = BwrapRuntime().build(task, tmp_path / "images")
    assert not res.ok and "no-such-package-xyz" in res.reason


def test_copies_in_and_out_never_follow_what_the_agent_left(session, tmp_path):
    """copy_in writes through `cp` inside the sandbox, so a symlink the agent planted where the copy
    goes resolves inside it (before #28 the host followed it, as root); copy_out never follows a
    symlink and refuses FIFOs with a reason instead of hanging or raising something else."""
    from termforge.errors import TermforgeError

    outside = tmp_path / "host-target"
    outside.mkdir()
    assert session.exec(f"mkdir -p /app/step && ln -s {outside} /app/step/data && mkfifo /app/pipe && "
                        "ln -s /etc /app/etc-link").ok
    src = tmp_path / "workdir"
    (src / "data").mkdir(parents=True)
    (src / "data" / "input.txt").write_text("step two\n")
    # Inside the sandbox the link dangles: cp refuses (the agent's doing, said with cp's reason),
    # and nothing is written on the host through it.
    with pytest.raises(TermforgeError, match="cannot overwrite non-directory"):
        session.copy_in(src, "/app/step")
    assert not list(outside.iterdir())
    session.copy_in(src, "/app/step2")
    assert session.exec("cat /app/step2/data/input.txt").stdout == "step two\n"
    session.copy_out("/app/greeting.txt", tmp_path / "out" / "greeting.txt")
    assert (tmp_path / "out" / "greeting.txt").read_text() == "hello\n"
    for path, why in (("/app/pipe", "FIFO"), ("/app/etc-link/passwd", "not a plain directory")):
        with pytest.raises(TermforgeError, match=why):
            session.copy_out(path, tmp_path / "out" / "x")


def test_sessions_keep_their_trees_in_memory_or_where_termforge_work_dir_says(tmp_path, monkeypatch):
    """runtime.bwrap.default_work_root: $TERMFORGE_WORK_DIR; else /dev/shm where it is a tmpfs
    (allowing exec, writable, 4 GiB free); else the system temp directory. A named place that
    cannot be used is an error naming the variable."""
    from termforge.errors import TermforgeError
    from termforge.runtime import bwrap

    monkeypatch.delenv(bwrap.WORK_DIR_ENV, raising=False)
    shm = os.statvfs("/dev/shm") if os.path.isdir("/dev/shm") else None
    usable = (shm is not None and bwrap._fs_type("/dev/shm") == "tmpfs" and not shm.f_flag & os.ST_NOEXEC
              and shm.f_bavail * shm.f_frsize >= bwrap.TMPFS_MIN_FREE)
    assert bwrap._fs_type("/proc") == "proc" and bwrap._fs_type("/proc/self") == "proc"
    assert bwrap.default_work_root() == (Path("/dev/shm") if usable else None)
    build = BwrapRuntime().build(_task(tmp_path, "true"), tmp_path / "images")
    assert build.ok, build.reason
    with BwrapRuntime().start(build.image, Limits()) as s:
        assert s.workdir.parent == (Path("/dev/shm") if usable else Path(tempfile.gettempdir()))
        # What a sandbox writes there runs there (a tmpfs mounted noexec is never picked).
        assert s.exec("printf '#!/bin/sh\necho ran\n' > /app/p && chmod +x /app/p && /app/p").stdout == "ran\n"
    named = Path(tempfile.mkdtemp(prefix="tf-work-dir-"))  # sessions' uids must pass through it
    named.chmod(0o711)
    try:
        monkeypatch.setenv(bwrap.WORK_DIR_ENV, str(named))
        assert bwrap.default_work_root() == named
        with BwrapRuntime().start(build.image, Limits()) as s:
            assert s.workdir.parent == named
    finally:
        named.rmdir()
    monkeypatch.setenv(bwrap.WORK_DIR_ENV, str(tmp_path / "missing"))
    with pytest.raises(TermforgeError, match="TERMFORGE_WORK_DIR=.*missing"):
        BwrapRuntime()
