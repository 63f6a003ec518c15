"""Bubblewrap runtime: the task's image as a read-only `/`, a private writable task layer at /app.

Layout inside every sandbox: the base image's root filesystem (termforge.images: built by
mmdebstrap, cached per user) bound read-only as `/`, fresh /dev /proc /tmp /home/user over the
mount points the image provides, the task layer bound at /app; new user, pid, ipc, uts, cgroup
and net namespaces (a task with network gets its own namespace connected to the outside by
slirp4netns, process.PublicNetwork, never the host's); uid 1000; every capability dropped;
killed with its parent. Nothing of the
host's /usr, /etc or PATH is visible. (`runtime.rootfs: host`, an explicit opt-in recorded in
every image.json, runs over the host's /usr and /etc instead: a tmpfs `/` with those bound
read-only, as before images.) Limits: wall clock (the caller's timeout), CPU seconds, address
space, process count, open files and file size (rlimits), a size-capped /tmp, and a watch on the
writable layer that kills the sandbox once /app and /home/user hold more than `Limits.disk_mb`.

When the host runs as root, each session runs under its own unprivileged host uid (the sandbox's
uid 1000 maps to it): the kernel never applies RLIMIT_NPROC to root, so a sandbox mapped to root
could fork without bound, and a uid of its own keeps one session's count (and files) apart from
every other's.

bwrap itself starts with an empty environment (`process.SANDBOX_HOST_ENV`): its processes inside the
sandbox (pid 1, the reaper) keep the environment they were started with, and /proc/1/environ is
readable by the sandbox's uid, so anything of the orchestrator's environment (API keys) would be
readable by the agent. Every tree the sandbox wrote is walked, measured, copied and removed on the
host through `runtime.trees` (iterative, bounded, never following a symlink).
"""

from __future__ import annotations

import functools
import os
import secrets
import select
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from pathlib import Path

from termforge.containment import check_task_id, contained
from termforge.errors import TermforgeError
from termforge.io import atomic_write_json, read_json, stable_hash
from termforge.runtime import accounting, rootlayer, trees, workspace
from termforge.runtime.base import Bind, BuildResult, ExecResult, Image, Limits, Runtime, Session
from termforge.runtime.process import (DiskWatch, Launch, NetworkNamespace, PublicNetwork, _limit_preexec, ipc_limits,
                                       limit_reason, nproc_prefix, own_ipc_namespaces, slirp_resolv_conf, tree_bounds)
from termforge.runtime.shell import PersistentShell

SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
SANDBOX_UID = 1000  # who a sandbox's processes are, inside it, unless the image names its User
# `rootfs` value meaning the host's /usr and /etc (runtime.rootfs: host), instead of an image.
HOST_ROOTFS = "host"
# Bumped when what goes into a task image changes, so cached task layers are rebuilt.
IMAGE_FORMAT = "bwrap-image-2"
OUTPUT_CAP = 4 * 1024 * 1024


def bwrap_available() -> bool:
    return shutil.which("bwrap") is not None


def sandbox_argv(
    layer: Path,
    command: list[str],
    *,
    rootfs: str | os.PathLike,
    binds: list[Bind] = (),
    env: dict[str, str] | None = None,
    cwd: str = "/app",
    allow_network: bool = False,
    tmp_dir: Path | None = None,
    home_dir: Path | None = None,
    tmp_mb: int | None = None,
    user: tuple[int, int, str] = (SANDBOX_UID, SANDBOX_UID, "user"),
    shm_dir: Path | None = None,
    own_ipc: bool = False,
    root_dir: Path | None = None,
    named_netns: bool = False,
) -> list[str]:
    """The bwrap command line for one process in a task sandbox over `rootfs`: an image's root
    filesystem (bound read-only as /; it provides the mount points bound below), or HOST_ROOTFS.
    `user`: (uid, gid, name) inside the sandbox's user namespace (an image's User); whatever it is,
    the namespace maps only the session's own unprivileged host uid and every capability is dropped.

    Every place the sandbox can write is a directory of the session's on the host (`tmp_dir`,
    `shm_dir`, `home_dir`, `layer`, writable binds), so one disk watch over them all holds the
    sandbox to one `disk_mb` (Scratch); /dev itself is read-only (bwrap's --dev is a tmpfs of no
    size the sandbox's uid owns). Without `tmp_dir`/`shm_dir` (callers outside a session), /tmp
    and /dev/shm are tmpfs of `tmp_mb` each. `own_ipc`: the caller starts bwrap in an IPC
    namespace of the sandbox's own, with its limits set (ipc_limits), which bwrap then keeps.
    `root_dir`: the session's writable root over `rootfs` (runtime.rootlayer), bound as / instead.
    `allow_network`: a "public" network, a namespace of the sandbox's own that its launcher connects
    to the outside with slirp4netns (process.PublicNetwork; never the host's namespace, whose
    loopback services and abstract sockets the sandbox would reach); with `named_netns`, the
    namespace the launcher enters (eval.tbench.network_namespace), which the sandbox keeps."""
    host = str(rootfs) == HOST_ROOTFS
    if host:
        # The host's root cannot be bound whole (a read-only / cannot get the /app mount point).
        argv = ["bwrap", "--tmpfs", "/", "--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"]
        for name in ("bin", "lib", "lib64", "sbin"):
            if os.path.exists(f"/usr/{name}"):
                argv += ["--symlink", f"usr/{name}", f"/{name}"]
    elif rootfs and os.path.isdir(os.path.join(rootfs, "usr")):
        argv = ["bwrap", "--bind", str(root_dir), "/"] if root_dir else ["bwrap", "--ro-bind", str(rootfs), "/"]
    else:
        raise TermforgeError(f"sandbox: no image root filesystem at {str(rootfs)!r} "
                             "(termforge images build makes the declared bases)")
    size = ["--size", str((tmp_mb or DEFAULT_TMPFS_MB) * 1024 * 1024)]
    argv += ["--dev", "/dev"]
    argv += ["--bind", str(shm_dir), "/dev/shm"] if shm_dir else [*size, "--tmpfs", "/dev/shm"]
    argv += ["--remount-ro", "/dev", "--proc", "/proc"]
    argv += ["--bind", str(tmp_dir), "/tmp"] if tmp_dir else [*size, "--tmpfs", "/tmp"]
    argv += ["--bind", str(home_dir), "/home/user"] if home_dir else ["--dir", "/home/user"]
    argv += ["--bind", str(layer), "/app"]
    for b in binds:
        argv += ["--bind" if b.writable else "--ro-bind", str(b.host), b.sandbox]
    if allow_network and not named_netns:
        # Name resolution through slirp4netns's DNS forwarder: the host's resolv.conf may name a
        # resolver on the host's loopback, which a namespace of the sandbox's own does not reach.
        argv += ["--ro-bind", slirp_resolv_conf(), "/etc/resolv.conf"]
    elif allow_network and not host:
        # A named namespace: the host's resolver over the image's empty /etc/resolv.conf, as before.
        argv += ["--ro-bind-try", "/etc/resolv.conf", "/etc/resolv.conf"]
    if host:
        # With every mount point in place, the tmpfs root itself becomes read-only.
        argv += ["--remount-ro", "/"]
    argv += ["--unshare-user", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try"]
    argv += [] if own_ipc else ["--unshare-ipc"]
    argv += [] if allow_network and named_netns else ["--unshare-net"]
    argv += ["--uid", str(user[0]), "--gid", str(user[1])]
    argv += ["--cap-drop", "ALL", "--die-with-parent", "--new-session", "--clearenv"]
    base_env = {"PATH": SANDBOX_PATH, "HOME": "/home/user", "USER": user[2], "LANG": "C.UTF-8",
                "TERM": "dumb"}
    base_env.update(env or {})
    for key, value in sorted(base_env.items()):
        argv += ["--setenv", key, value]
    argv += ["--chdir", cwd, "--"] + command
    return argv


# The size of /tmp and /dev/shm where a caller gives no directory of its own for them (sandbox_argv).
DEFAULT_TMPFS_MB = 64


class Scratch:
    """A sandbox's /tmp and /dev/shm: fresh directories in its session's tree (so they count
    against the session's `disk_mb` with /app and the home, and come out of its reservation on
    the work root), owned by the session's uid, sticky and world-writable as a /tmp is."""

    def __init__(self, under: Path, uid: int | None):
        self.root = Path(tempfile.mkdtemp(prefix="tf-scratch-", dir=under))
        try:
            self.tmp, self.shm = self.root / "tmp", self.root / "shm"
            for d in (self.tmp, self.shm):
                d.mkdir()
                os.chmod(d, 0o1777)
            chown_tree(self.root, uid)
        except BaseException:
            trees.remove_tree(self.root)
            raise

    @property
    def roots(self) -> list[Path]:
        return [self.tmp, self.shm]

    def binds(self) -> list[Bind]:
        return [Bind(self.tmp, "/tmp", True), Bind(self.shm, "/dev/shm", True)]

    def remove(self) -> list[str]:
        return trees.remove_tree(self.root)


# Where sessions keep their writable trees when the caller names no place (default_work_root).
WORK_DIR_ENV = "TERMFORGE_WORK_DIR"
TMPFS_DIR = "/dev/shm"
TMPFS_MIN_FREE = 4 << 30


def _fs_type(path: str) -> str | None:
    """The file-system type of the mount holding `path` (the longest mount point above it)."""
    best, kind = "", None
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                fields = left.split()
                point = fields[4].replace("\\040", " ") if len(fields) > 4 else ""
                inside = path == point or path.startswith(point.rstrip("/") + "/")
                if inside and len(point) >= len(best) and right.split():
                    best, kind = point, right.split()[0]
    except OSError:
        return None
    return kind


@functools.lru_cache(maxsize=4)
def _default_work_root(named: str | None) -> Path | None:
    if named:
        path = Path(named)
        if not path.is_dir() or not os.access(path, os.W_OK | os.X_OK):
            raise TermforgeError(f"{WORK_DIR_ENV}={named}: not a directory termforge can write")
        return path
    try:
        vfs = os.statvfs(TMPFS_DIR)
    except OSError:
        return None
    if (_fs_type(TMPFS_DIR) == "tmpfs" and not vfs.f_flag & os.ST_NOEXEC and os.access(TMPFS_DIR, os.W_OK | os.X_OK)
            and vfs.f_bavail * vfs.f_frsize >= TMPFS_MIN_FREE):
        return Path(TMPFS_DIR)
    return None


def default_work_root() -> Path | None:
    """Where a session's writable trees (its /app and home, the grader's /tests and /logs) live
    when the caller names no place: $TERMFORGE_WORK_DIR; else /dev/shm where it is a tmpfs that
    allows exec, termforge can write and has 4 GiB free; else None (the system temp directory).
    Why memory: validation makes and removes about 50 such trees per task, and on a disk file
    system each removal is journaled (with `discard`, each freed block also waits on the device:
    measured, a sixth of validation's wall time). Each tree stays under `Limits.disk_mb`."""
    return _default_work_root(os.environ.get(WORK_DIR_ENV) or None)


# BwrapSession's default `uid`: a fresh one (session_uid()).
FRESH_UID = object()
SANDBOX_UID_BASE = 200_000  # host uids given to sessions when the host runs as root
SANDBOX_UID_SPAN = 1 << 20


def session_uid() -> int | None:
    """A fresh unprivileged host uid for one session, or None when the host is not root (then
    the sandbox maps to the caller's own uid, to which RLIMIT_NPROC already applies)."""
    if os.geteuid() != 0:
        return None
    return SANDBOX_UID_BASE + secrets.randbelow(SANDBOX_UID_SPAN)


def chown_tree(root: Path, uid: int | None) -> None:
    """Give a tree termforge wrote (a layer copy, a verifier toolchain) to a session's uid
    (symlinks themselves, never their targets). Never used on what a sandbox wrote."""
    if uid is None:
        return
    why = trees.chown(Path(root), uid)
    if why:
        raise TermforgeError(f"cannot give {root} to the session's uid: {why}")


class _CappedReader:
    """Drains a pipe in a thread, keeping its first and last OUTPUT_CAP/2 bytes."""

    def __init__(self, stream):
        self.stream, self.head, self.tail, self.dropped = stream, bytearray(), bytearray(), False
        self.thread = accounting.start_thread(self._run)

    def _run(self) -> None:
        half = OUTPUT_CAP // 2
        fd = self.stream.fileno()
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            room = half - len(self.head)
            if room > 0:
                self.head += chunk[:room]
                chunk = chunk[room:]
            if chunk:
                self.tail += chunk
                if len(self.tail) > half:
                    del self.tail[: len(self.tail) - half]
                    self.dropped = True

    def result(self) -> bytes:
        # Processes outside the pid namespace cannot hold the pipe: it closes when the sandbox dies.
        self.thread.join(timeout=10)
        self.stream.close()
        mark = b"\n[... output truncated ...]\n" if self.dropped else b""
        return bytes(self.head) + mark + bytes(self.tail)


def _feed(pipe, data: bytes) -> None:
    try:
        pipe.write(data)
        pipe.close()
    except (BrokenPipeError, OSError):
        pass


# Popen.wait(timeout) polls, its sleeps doubling from 0.5 ms up to 50 ms: a sandbox that ran 20 ms
# was noticed about 30 ms after it began, one that ran 100 ms up to 14 ms late, and validation runs
# about 15 such sandboxes per task. wait_for wakes on the sandbox's pidfd instead. After the disk
# watch killed a sandbox, bwrap is gone at once while --die-with-parent kills what ran inside a
# moment later: the caller waits KILL_SETTLE before it goes on, at least the margin Popen's
# polling happened to give.
KILL_SETTLE = 0.05


def wait_for(proc: subprocess.Popen, timeout: float) -> None:
    """proc.wait(timeout), woken the moment the process ends; raises subprocess.TimeoutExpired."""
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # no pidfds (kernel < 5.3), or already reaped
        proc.wait(timeout=timeout)
        return
    try:
        ready, _, _ = select.select([pidfd], [], [], max(0.0, timeout))
    finally:
        os.close(pidfd)
    if not ready:
        raise subprocess.TimeoutExpired(proc.args, timeout)
    proc.wait()


def run_sandboxed(argv: list[str], timeout: float, limits: Limits, stdin: bytes | None = None, *,
                  uid: int | None = None, watch: list[Path] = (), pass_fds: tuple[int, ...] = (),
                  ipc: dict[str, int] | None = None, netns: NetworkNamespace | None = None,
                  public_net: bool = False) -> ExecResult:
    """Run a bwrap command line; on timeout kill the sandbox (its pid namespace dies with it).
    `netns`: the network namespace it starts in (with --share-net, the one it keeps).
    `public_net`: the sandbox's own namespace (sandbox_argv's --unshare-net) is connected to the
    outside by slirp4netns before its command runs, which is ended and reaped with the sandbox."""
    start = time.monotonic()
    net = PublicNetwork(uid) if public_net else None
    try:
        return _run_sandboxed(net.argv(argv) if net else argv, timeout, limits, stdin, uid, watch,
                              (*pass_fds, *(net.fds if net else ())), ipc, netns, net, start)
    finally:
        if net is not None:
            net.close()


def _run_sandboxed(argv, timeout, limits, stdin, uid, watch, pass_fds, ipc, netns, net, start) -> ExecResult:
    launch = Launch(argv)
    # Only where somebody is measuring (bench/bench_validate.py, validation's per-step profile).
    cgroup = accounting.sandbox_cgroup() if accounting.current() is not None else None
    ns_fd = netns.open() if netns is not None else None
    try:
        proc = subprocess.Popen(
            launch.argv,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=_limit_preexec(limits, uid, cgroup, ipc, (netns, ns_fd) if netns is not None else None),
            pass_fds=(*pass_fds, *launch.fds),
            env=launch.env,
        )
    except BaseException:
        if cgroup is not None:
            cgroup.finish(wait=0)
        raise
    finally:
        if ns_fd is not None:
            os.close(ns_fd)
        launch.close()
    if net is not None:
        try:
            net.connect(proc)
        except BaseException:
            proc.wait()
            if cgroup is not None:
                cgroup.finish(wait=0)
            raise
    disk = DiskWatch(list(watch), limits.disk_mb, proc.pid, tree_bounds(limits))
    # Bounded readers: a sandboxed program printing without end costs the host at most OUTPUT_CAP
    # per stream (head and tail kept), never its memory.
    readers = [_CappedReader(proc.stdout), _CappedReader(proc.stderr)]
    if stdin is not None:
        accounting.start_thread(_feed, proc.stdin, stdin)
    timed_out = False
    try:
        wait_for(proc, timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        disk.stop()
    if disk.hit:
        time.sleep(KILL_SETTLE)
    out, err = (r.result() for r in readers)
    if accounting.current() is not None:
        accounting.charge_sandbox(cgroup.finish() if cgroup is not None else None)
    code = 124 if timed_out else proc.returncode
    if code is not None and code < 0:
        # Killed by a signal: report it the way a shell would (128 + signal number).
        code = 128 - code
    return ExecResult(
        exit_code=code,
        stdout=out.decode(errors="replace"),
        stderr=err.decode(errors="replace"),
        duration_sec=time.monotonic() - start,
        timed_out=timed_out,
        limit_hit=limit_reason(code, limits, disk.reason),
    )


def tree_digest(root: Path) -> str:
    """Content hash of a directory tree (paths, modes and bytes), bounded in depth and entries
    (an unwalkable tree still gets a digest, which names why it is incomplete)."""
    return stable_hash(trees.digest_entries(Path(root)), 24)


def _check_reachable(workdir: Path, uid: int | None) -> None:
    """A session's sandboxes start as its own uid: every directory above its work directory must
    let that uid through, or bwrap cannot find the layer and every grade would be a 0 that is
    really the host's fault. Said once, here, as an infrastructure error."""
    if uid is None:
        return
    for parent in workdir.resolve().parents:
        st = os.stat(parent)
        if not st.st_mode & 0o001 and not (st.st_uid == uid and st.st_mode & 0o100):
            raise TermforgeError(f"runtime work directory {workdir.parent}: {parent} (mode {oct(st.st_mode & 0o777)}) "
                                 "cannot be entered by the sandbox's uid; give it o+x (e.g. chmod 0711)")


def layer_problem(layer: Path, limits: Limits) -> str | None:
    """Why a built layer cannot be walked within the tree bounds (every session copies it, and
    the disk watcher measures it), or None; FIFOs, sockets and devices are not copied either."""
    walk = trees.TreeWalk(layer, trees.Bounds(limits.tree_depth, limits.tree_entries, None))
    for e in walk:
        if not (e.is_dir or stat.S_ISREG(e.st.st_mode) or stat.S_ISLNK(e.st.st_mode)):
            return f"{e.rel[:200]} is {trees.describe_mode(e.st.st_mode)}"
    return walk.incomplete


class BwrapSession(Session):
    """A private copy of an image's layer; every exec is a fresh sandbox over that copy.

    Extra binds (tests, logs, verifier toolchain) are added per exec, so the verifier can see
    files the agent's processes never could.
    """

    # Set by grading.gradepool.GradePool.start: grades in this session fork a grader from that
    # pool's zygote (verifier._run_grader); None: every grade starts its own grader.
    grade_pool = None
    # The network namespace a sandbox with network joins (NetworkNamespace); None: the host's.
    netns = None
    # (uid, gid, name) of the sandbox's processes inside it (HarborSession: the image's User).
    sandbox_user = (SANDBOX_UID, SANDBOX_UID, "user")
    # The session's writable root over the image (make_root_writable); None: the image read-only.
    writable_root = None

    def __init__(self, image: Image, limits: Limits, work_root: Path | None = None, *, uid=FRESH_UID):
        """`uid`: the host uid the session's sandboxes run as; by default a fresh one per session
        (session_uid). A grade pool passes its own, which its zygote's grades run as."""
        if not image.rootfs:
            raise TermforgeError(f"task {image.task_id}: the image names no root filesystem (rebuild it)")
        self.image = image
        self.limits = limits
        self.rootfs = image.rootfs
        self.binds: list[Bind] = []
        self._stopped = False
        # What stop() could not remove (never expected: tests count leftovers after attacks).
        self.cleanup_problems: list[str] = []
        root = Path(work_root or default_work_root() or tempfile.gettempdir())
        # Its whole disk allowance, held on the work root before anything is written there
        # (runtime.workspace): what this session writes can never fill another session's space.
        self.reservation = workspace.reserve(root, workspace.session_bytes(limits.disk_mb),
                                             f"a session of task {image.task_id}")
        try:
            self.workdir = Path(tempfile.mkdtemp(prefix=f"tf-{image.task_id}-", dir=root))
        except BaseException:
            self.reservation.release()
            raise
        try:
            self.uid = session_uid() if uid is FRESH_UID else uid
            # Its sandboxes' own IPC namespaces, with limits, where this process can make them.
            self.ipc = ipc_limits(limits) if own_ipc_namespaces() else None
            _check_reachable(self.workdir, self.uid)
            self.layer = self.workdir / "app"
            problems = trees.copy_tree(image.path / "layer", self.layer,
                                       trees.Bounds(limits.tree_depth, limits.tree_entries, None))
            if problems:
                raise TermforgeError(f"task {image.task_id}: the image's layer cannot be copied: {problems[0]}")
            self.home = self.workdir / "home"
            self.home.mkdir()
            chown_tree(self.workdir, self.uid)
        except BaseException:
            trees.remove_tree(self.workdir)
            self.reservation.release()
            raise

    def writable_roots(self) -> list[Path]:
        return [self.layer, self.home, *(self.writable_root.roots if self.writable_root else [])]

    def make_root_writable(self) -> bool:
        """Give this session's sandboxes the image's whole root filesystem writable, as a container's
        (runtime.rootlayer: an overlay whose upper layer lies in this session's tree, under the one
        disk cap; the image itself is never written). False where this host cannot (not root, or
        the host's /usr as root): the root stays read-only but for /app, /tmp and the home."""
        if self.uid is None or str(self.rootfs) == HOST_ROOTFS or not rootlayer.available():
            return False
        self.writable_root = rootlayer.WritableRoot.mount(self.rootfs, self.workdir / "rootfs",
                                                          self.sandbox_user[:2], self.uid)
        return True

    def exec(self, command: str, timeout: float | None = None, env: dict | None = None,
             cwd: str = "/app", binds: list[Bind] = (), stdin: bytes | None = None,
             keep_home: bool = True, argv: list[str] | None = None, pass_fds: tuple[int, ...] = ()) -> ExecResult:
        """Run `command` under bash (or `argv` as given) in a fresh sandbox over this session's layer."""
        if self._stopped:
            raise TermforgeError(f"task {self.image.task_id}: session already stopped")
        scratch = self.scratch()
        try:
            argv = sandbox_argv(
                self.layer,
                nproc_prefix(self.limits, self.uid) + (argv or ["/bin/bash", "--noprofile", "--norc", "-c", command]),
                rootfs=self.rootfs,
                binds=[*self.binds, *binds],
                env=env,
                cwd=cwd,
                allow_network=self.image.allow_network,
                home_dir=self.home if keep_home else None,
                tmp_dir=scratch.tmp,
                shm_dir=scratch.shm,
                own_ipc=self.ipc is not None,
                user=self.sandbox_user,
                root_dir=self.writable_root.merged if self.writable_root else None,
                named_netns=self.netns is not None,
            )
            return run_sandboxed(argv, timeout or self.limits.wall_sec, self.limits, stdin=stdin, uid=self.uid,
                                 watch=self.writable_roots() + scratch.roots + [b.host for b in binds if b.writable],
                                 pass_fds=pass_fds, ipc=self.ipc,
                                 netns=self.netns if self.image.allow_network else None,
                                 public_net=self.image.allow_network and self.netns is None)
        finally:
            scratch.remove()

    def scratch(self) -> Scratch:
        """A fresh /tmp and /dev/shm for one sandbox of this session, in its tree."""
        return Scratch(self.workdir, self.uid)

    def open_shell(self, env: dict | None = None, cwd: str = "/app"):
        """A persistent bash in this session's sandbox (the agent's shell), started in `cwd`."""
        # One /tmp and /dev/shm for the shell's life, a restarted shell's too (removed with the
        # session's tree).
        scratch = self.scratch()

        def argv() -> list[str]:
            return sandbox_argv(self.layer, nproc_prefix(self.limits, self.uid) + ["/bin/bash", "--noprofile", "--norc", "-s"],
                                rootfs=self.rootfs, binds=self.binds,
                                env=env, cwd=cwd, allow_network=self.image.allow_network, home_dir=self.home,
                                tmp_dir=scratch.tmp, shm_dir=scratch.shm, own_ipc=self.ipc is not None,
                                user=self.sandbox_user,
                                root_dir=self.writable_root.merged if self.writable_root else None,
                                named_netns=self.netns is not None)

        return PersistentShell(argv, self.limits, uid=self.uid, watch=self.writable_roots() + scratch.roots,
                               ipc=self.ipc, netns=self.netns if self.image.allow_network else None,
                               public_net=self.image.allow_network and self.netns is None)

    def copy_in(self, src: Path, dst: str) -> None:
        """Copy a host file or directory (termforge's own, e.g. a step's workdir) to `dst` in the
        sandbox. The copy into the agent's tree is made by `cp` inside a sandbox, so a symlink the
        agent left on the way resolves inside the sandbox (as `docker cp` into a container does),
        never on the host."""
        src = Path(src)
        stage = Path(tempfile.mkdtemp(prefix="tf-copy-in-", dir=self.workdir))
        try:
            target = stage / "item"
            if src.is_dir():
                problems = trees.copy_tree(src, target)
            else:
                target.mkdir()
                problems = trees.copy_tree(src.parent, target, skip=lambda e: e.depth == 1 and e.name != src.name)
                target = target / src.name
            if problems:
                raise TermforgeError(f"copy_in {src} -> {dst}: {problems[0]}")
            chown_tree(stage, self.uid)
            inside = "/tmp/tf-copy-in/" + target.relative_to(stage).as_posix()
            script = ('set -e; d="$1"; s="$2"; if [ -d "$s" ]; then mkdir -p -- "$d"; cp -a -- "$s"/. "$d"/; '
                      'else mkdir -p -- "$(dirname -- "$d")"; cp -a -- "$s" "$d"; fi')
            res = self.exec("", argv=["/bin/bash", "--noprofile", "--norc", "-c", script, "copy-in", dst, inside],
                            binds=[Bind(stage, "/tmp/tf-copy-in")], cwd="/")
            if not res.ok:
                raise TermforgeError(f"copy_in {src} -> {dst}: cp exited {res.exit_code}: {res.tail(300)}")
        finally:
            trees.remove_tree(stage)

    def copy_out(self, src: str, dst: Path) -> None:
        """Copy `src` (under /app or /home/user) to the host path `dst`: regular files, directories
        and symlinks (kept as symlinks), within the tree bounds; a symlink on the way to `src`, a
        FIFO or an unwalkable tree is a TermforgeError naming it (the agent's doing, never an
        infrastructure failure)."""
        host, rel = self._split(src)
        parent_fd = os.open(host, trees.DIR_FLAGS)
        try:
            parts = [p for p in rel.split("/") if p not in ("", ".")]
            if ".." in parts:
                raise TermforgeError(f"path {src!r} escapes the task layer")
            for part in parts[:-1]:
                try:
                    nxt = os.open(part, trees.DIR_FLAGS, dir_fd=parent_fd)
                except OSError:
                    raise TermforgeError(f"copy_out {src}: {part!r} is not a plain directory") from None
                os.close(parent_fd)
                parent_fd = nxt
            name = parts[-1] if parts else "."
            st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                problems = trees.copy_tree(Path(f"/proc/self/fd/{parent_fd}/{name}"), Path(dst), tree_bounds(self.limits))
            elif stat.S_ISREG(st.st_mode):
                Path(dst).parent.mkdir(parents=True, exist_ok=True)
                out_fd = os.open(Path(dst).parent, trees.DIR_FLAGS)
                try:
                    trees.copy_file(parent_fd, name, out_fd, st)
                    if Path(dst).name != name:
                        os.replace(name, Path(dst).name, src_dir_fd=out_fd, dst_dir_fd=out_fd)
                    problems = []
                finally:
                    os.close(out_fd)
            else:
                problems = [f"{src} is {trees.describe_mode(st.st_mode)}"]
        except FileNotFoundError:
            raise TermforgeError(f"copy_out {src}: no such file in the sandbox") from None
        finally:
            os.close(parent_fd)
        if problems:
            raise TermforgeError(f"copy_out {src}: {problems[0]}")

    def _host_path(self, sandbox_path: str) -> Path:
        """The host path of a file the oracle (task code) wrote, resolved inside the layer."""
        host, rel = self._split(sandbox_path)
        resolved = (host / rel).resolve()
        if not str(resolved).startswith(str(host.resolve())):
            raise TermforgeError(f"path {sandbox_path!r} escapes the task layer")
        return resolved

    def _split(self, sandbox_path: str) -> tuple[Path, str]:
        for prefix, host in (("/app", self.layer), ("/home/user", self.home)):
            if sandbox_path == prefix or sandbox_path.startswith(prefix + "/"):
                return host, sandbox_path[len(prefix):].lstrip("/")
        raise TermforgeError(f"path {sandbox_path!r} is outside the task layer (/app, /home/user)")

    def stop(self) -> None:
        """Remove the session's host directory, whatever the sandbox left in it (never raises;
        what could not be removed is kept in `cleanup_problems`)."""
        if not self._stopped:
            self._stopped = True
            detached = self.writable_root.unmount() if self.writable_root else []
            # A mount that would not come off is never walked into: its tree is left, and said.
            self.cleanup_problems = detached or trees.remove_tree(self.workdir)
            self.reservation.release()


class BwrapRuntime(Runtime):
    name = "bwrap"

    def __init__(self, work_root: str | Path | None = None, rootfs: str = "image",
                 image_cache: str | Path | None = None, base: str | None = None, log=print):
        """`rootfs`: "image" (each task runs on its base image: the default) or "host" (the host's
        /usr and /etc: an explicit opt-in, recorded in every image.json). `image_cache`: where base
        images are built and kept (termforge.images.image_cache_dir). `base`: the base of tasks
        whose task.json names none (termforge.images.DEFAULT_BASE)."""
        from termforge.errors import ConfigError

        self.work_root = Path(work_root) if work_root else default_work_root()
        if rootfs not in ("image", HOST_ROOTFS):
            raise ConfigError(f"runtime.rootfs: expected 'image' or 'host', got {rootfs!r}")
        self.rootfs_mode = rootfs
        self.image_cache = image_cache
        self.base = base
        self.log = log
        if not bwrap_available():
            raise TermforgeError("runtime bwrap: the 'bwrap' executable is not on PATH "
                                 "(apt-get install bubblewrap)")

    # -- base images ---------------------------------------------------------------------------
    def base_request(self, task: dict) -> dict:
        """What a task asks of its image: a base (its task.json's, else the runtime's default)
        and extra Debian packages."""
        env = task.get("environment", {}) or {}
        return {"base": env.get("base") or self.base or self.default_base,
                "apt_packages": sorted(set(env.get("apt_packages", []) or []))}

    # Base images are built by the layer above (termforge.images.runtimes.BwrapRuntime overrides
    # these two): a sandbox runtime is handed a root filesystem, it never builds one.
    default_base: str | None = None

    def task_base(self, request: dict):
        """The built base for a request: its .rootfs, .digest and .ref()."""
        raise TermforgeError(f"base image {request['base']}: this runtime builds no base images "
                             "(termforge.images.runtimes.BwrapRuntime does; or runtime.rootfs: host)")

    def resolve_rootfs(self, meta: dict, where: str) -> str:
        """The root filesystem an image.json's sessions run on."""
        if meta.get("rootfs") == HOST_ROOTFS:
            return HOST_ROOTFS
        raise TermforgeError(f"{where}: its image runs on a base image, which this runtime cannot find "
                             "(termforge.images.runtimes.BwrapRuntime can)")

    def build(self, task_dir: Path, images_dir: Path, timeout: float = 600,
              limits: Limits | None = None) -> BuildResult:
        """Run setup.sh in a sandbox over the task's base image to produce the task layer;
        content-addressed (environment/ and the base's digest) and atomic."""
        task_dir = Path(task_dir)
        task = read_json(task_dir / "task.json")
        # The id comes from a file a generator wrote: the image goes where containment allows.
        task_id = check_task_id(task.get("id"), task_dir / "task.json")
        env_dir = task_dir / "environment"
        final = contained(images_dir, task_id, where=task_dir / "task.json")
        meta_path = final / "image.json"
        allow_network = bool(task.get("environment", {}).get("allow_network", False))
        request = self.base_request(task)
        start = time.monotonic()
        if self.rootfs_mode == HOST_ROOTFS:
            rootfs, base_ref = HOST_ROOTFS, None
        else:
            try:
                base = self.task_base(request)
            except TermforgeError as exc:
                reason = f"task {task_id}: base image {request['base']} + {request['apt_packages']}: {exc}"
                return BuildResult(False, None, reason, reason, time.monotonic() - start)
            rootfs, base_ref = str(base.rootfs), base.ref()
        digest = stable_hash([IMAGE_FORMAT, tree_digest(env_dir), base_ref["digest"] if base_ref else HOST_ROOTFS,
                              request], 24)
        if meta_path.exists():
            meta = read_json(meta_path)
            if meta.get("digest") == digest and meta.get("backend") == self.name:
                return BuildResult(True, self._image(final, meta, rootfs), "cached",
                                   (final / "build.log").read_text() if (final / "build.log").exists() else "",
                                   time.monotonic() - start, cached=True)
        from termforge.io import publish_dir, staging_dir

        stage = staging_dir(final)
        layer, tmp, home, shm = stage / "layer", stage / "tmp", stage / "home", stage / "shm"
        for d in (layer, tmp, home, shm):
            d.mkdir()
        argv = sandbox_argv(
            layer,
            ["/bin/bash", "--noprofile", "--norc", "/tmp/env/setup.sh"],
            rootfs=rootfs,
            binds=[Bind(env_dir, "/tmp/env")],
            allow_network=allow_network,
            tmp_dir=tmp,
            home_dir=home,
            shm_dir=shm,
            own_ipc=own_ipc_namespaces(),
        )
        # setup.sh is task code: everything it can write counts against one disk_mb.
        limits = limits or Limits(wall_sec=timeout, cpu_sec=int(timeout))
        res = run_sandboxed(argv, timeout, limits, watch=[layer, tmp, home, shm],
                            ipc=ipc_limits(limits) if own_ipc_namespaces() else None, public_net=allow_network)
        on = f"base {base_ref['name']} {base_ref['digest'][:19]}" if base_ref else "the host's /usr (runtime.rootfs: host)"
        log = (f"# on {on}\n$ bash /tmp/env/setup.sh  (exit {res.exit_code}, {res.duration_sec:.2f}s)\n"
               f"{res.stdout}{res.stderr}")
        escaped = sorted(set(os.listdir(tmp)) - {"env"})
        escaped = [f"/tmp/{p}" for p in escaped] + [f"/home/user/{p}" for p in sorted(os.listdir(home))]
        escaped += [f"/dev/shm/{p}" for p in sorted(os.listdir(shm))]
        escaped = [os.fsencode(p).decode("utf-8", "backslashreplace") for p in escaped]
        reason = ""
        if res.limit_hit:
            reason = f"setup.sh hit a limit: {res.limit_hit}"
        elif res.timed_out:
            reason = f"setup.sh timed out after {timeout:.0f}s"
        elif "Read-only file system" in res.stderr or "Permission denied" in res.stderr:
            reason = "setup.sh tried to write outside the task layer: " + _first_line_with(
                res.stderr, ("Read-only file system", "Permission denied"))
        elif res.exit_code != 0:
            reason = f"setup.sh failed with exit code {res.exit_code}: {res.tail(300)}"
        elif escaped:
            reason = f"setup.sh wrote outside the task layer: {', '.join(escaped)}"
        else:
            unwalkable = layer_problem(layer, limits)
            if unwalkable:
                reason = f"setup.sh left a task layer the host cannot walk: {unwalkable}"
        if reason:
            trees.remove_tree(stage)
            return BuildResult(False, None, reason, log, res.duration_sec)
        for d in (tmp, home, shm):
            trees.remove_tree(d)
        (stage / "build.log").write_text(log)
        layer_digest = tree_digest(layer)
        meta = {"task_id": task_id, "backend": self.name, "digest": digest, "allow_network": allow_network,
                "rootfs": HOST_ROOTFS if base_ref is None else "image", "base_request": request, "base": base_ref,
                "layer_digest": layer_digest,
                "image_digest": stable_hash([base_ref["digest"] if base_ref else HOST_ROOTFS, layer_digest], 24)}
        atomic_write_json(stage / "image.json", meta)
        publish_dir(stage, final)
        return BuildResult(True, self._image(final, meta, rootfs), "built", log, time.monotonic() - start)

    def _image(self, path: Path, meta: dict, rootfs: str) -> Image:
        return Image(meta["task_id"], self.name, path, meta["digest"], meta.get("allow_network", False),
                     meta=image_summary(meta), rootfs=rootfs)

    def load(self, images_dir: Path, task_id: str) -> Image:
        meta_path = Path(images_dir) / task_id / "image.json"
        if not meta_path.exists():
            raise TermforgeError(f"task {task_id}: no built image at {meta_path.parent}")
        meta = read_json(meta_path)
        return self._image(meta_path.parent, meta, self.resolve_rootfs(meta, f"task {task_id}"))

    def start(self, image: Image, limits: Limits | None = None, *, work_root: Path | None = None,
              uid=FRESH_UID) -> BwrapSession:
        return BwrapSession(image, limits or Limits(), work_root or self.work_root, uid=uid)


def image_summary(meta: dict) -> dict:
    """What artefacts record about the image a task ran on (corpus manifest, exports, report):
    the image digest (base digest + layer digest), the base's name, digest and lock digest, and
    whether it ran on the host's /usr instead."""
    base = meta.get("base") or {}
    return {"image_digest": meta.get("image_digest"), "layer_digest": meta.get("layer_digest"),
            "rootfs": meta.get("rootfs", HOST_ROOTFS), "base": base.get("name"), "base_names": base.get("names", []),
            "base_digest": base.get("digest"), "base_lock_digest": base.get("lock_digest"),
            "apt_packages": (meta.get("base_request") or {}).get("apt_packages", [])}


def _first_line_with(text: str, needles: tuple[str, ...]) -> str:
    for line in text.splitlines():
        if any(n in line for n in needles):
            return line.strip()
    return text.strip()[:200]
