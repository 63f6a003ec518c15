"""One sandboxed process under limits, the parts every launcher shares (bwrap sessions, the
persistent shell, the grade pool): its command line (bwrap's options from a memfd) and environment,
the network namespaces (a public network's slirp4netns, a named namespace) and IPC namespaces,
rlimits and cgroup set before exec, the watch on its writable trees' disk use, and the reason a
limit gives for its end.
"""

from __future__ import annotations

import functools
import os
import re
import resource
import select
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

from termforge.errors import TermforgeError
from termforge.runtime import accounting, trees
from termforge.runtime.base import Limits

# The environment bwrap itself is started with: nothing of the host's (runtime.bwrap's docstring).
SANDBOX_HOST_ENV: dict[str, str] = {}
FSIZE_EXIT = 128 + signal.SIGXFSZ


def tree_bounds(limits: Limits) -> trees.Bounds:
    """How far the host walks a sandbox's writable trees (runtime.limits tree_depth/tree_entries)."""
    return trees.Bounds(depth=limits.tree_depth, entries=limits.tree_entries, seconds=trees.DEFAULT_BOUNDS.seconds)


# How many values each bwrap option termforge uses takes (an option's value may itself be "--").
_BWRAP_ARITY = {
    **dict.fromkeys(("--unshare-all", "--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc",
                     "--unshare-uts", "--unshare-cgroup", "--unshare-cgroup-try", "--share-net", "--die-with-parent",
                     "--new-session", "--clearenv", "--as-pid-1"), 0),
    **dict.fromkeys(("--uid", "--gid", "--chdir", "--cap-add", "--cap-drop", "--remount-ro", "--proc", "--dev",
                     "--tmpfs", "--dir", "--size", "--unsetenv", "--hostname", "--perms", "--mqueue"), 1),
    **dict.fromkeys(("--bind", "--ro-bind", "--dev-bind", "--bind-try", "--ro-bind-try", "--dev-bind-try",
                     "--symlink", "--setenv", "--chmod"), 2),
    # PublicNetwork's: where bwrap reports the sandbox's pid, and what it waits on before the command.
    **dict.fromkeys(("--info-fd", "--block-fd"), 1),
}


def _options_end(argv: list[str]) -> int:
    """Where bwrap's options end in `argv` (the index of the `--` before the command)."""
    i = 1
    while i < len(argv) and argv[i] != "--":
        if argv[i] not in _BWRAP_ARITY:
            raise TermforgeError(f"sandbox: bwrap option {argv[i]!r} is not one termforge passes")
        i += 1 + _BWRAP_ARITY[argv[i]]
    return i


class Launch:
    """A command line as it is started. bwrap stays in the sandbox as its pid 1 (the reaper), whose
    /proc/1/cmdline every process inside can read: so bwrap takes its options (the image cache's
    root filesystem, the session's directories on the work root) from a memfd (`--args FD`, which
    bwrap reads and closes before anything of the sandbox runs) and its visible command line is
    `bwrap --args N -- COMMAND...`, the command naming sandbox paths only. `bwrap` is resolved on
    the host's PATH here, because bwrap itself runs with an empty environment. `fds` must be
    passed to the child (pass_fds) and `close()`d once it started."""

    def __init__(self, argv: list[str]):
        argv = list(argv)
        self.fds: tuple[int, ...] = ()
        self.env = popen_env(argv)
        if not argv or argv[0] != "bwrap":
            self.argv = argv
            return
        split = _options_end(argv)
        fd = os.memfd_create("bwrap-args", os.MFD_CLOEXEC)
        try:
            data = memoryview(b"".join(os.fsencode(a) + b"\0" for a in argv[1:split]))
            while data:
                data = data[os.write(fd, data):]
            os.lseek(fd, 0, os.SEEK_SET)
        except BaseException:
            os.close(fd)
            raise
        self.fds = (fd,)
        self.argv = [shutil.which("bwrap") or "/usr/bin/bwrap", "--args", str(fd), *argv[split:]]

    def close(self) -> None:
        for fd in self.fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self.fds = ()


def popen_env(argv: list[str]) -> dict[str, str] | None:
    """The environment to start `argv` with: none of the host's for bwrap (whose own processes
    stay visible inside the sandbox); other runtimes' launchers (apptainer) clean it themselves."""
    return SANDBOX_HOST_ENV if argv and Path(argv[0]).name == "bwrap" else None


CLONE_NEWNET = 0x40000000


class NetworkNamespace:
    """A named network namespace (/run/netns/NAME, `ip netns add`) that a sandbox with network
    joins instead of the host's: its fd is opened here, in the parent, and entered in the child
    before it drops root (setns needs CAP_SYS_ADMIN), so the sandbox's --share-net shares it."""

    def __init__(self, path: str):
        import ctypes

        self.path = path
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._setns = self._libc.setns  # resolved now: nothing is looked up after fork
        self._errno = ctypes.get_errno

    def open(self) -> int:
        try:
            return os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise TermforgeError(f"network namespace {self.path}: {exc.strerror}") from None

    def enter(self, fd: int) -> None:
        if self._setns(fd, CLONE_NEWNET) != 0:
            raise OSError(self._errno(), f"cannot enter the network namespace {self.path}")


SLIRP4NETNS = "slirp4netns"
# slirp4netns's fixed addresses (--configure): its DNS forwarder, which resolves with the host's
# resolver, is what the sandbox's /etc/resolv.conf names.
SLIRP_DNS = "10.0.2.3"
SLIRP_MTU = "65520"
NS_GET_USERNS = 0xB701  # ioctl on a namespace fd: the user namespace owning it
# How long the sandbox's network may take to come up (bwrap reporting its pid, slirp4netns ready).
NETWORK_UP_SEC = 30.0


def slirp4netns_path() -> str:
    """slirp4netns on the host's PATH; a sandbox that needs network without it is refused (never
    given the host's network namespace instead)."""
    path = shutil.which(SLIRP4NETNS) or next((p for p in (f"/usr/bin/{SLIRP4NETNS}", f"/usr/local/bin/{SLIRP4NETNS}")
                                             if os.access(p, os.X_OK)), None)
    if path is None:
        raise TermforgeError(f"sandbox network: {SLIRP4NETNS} is not installed (apt-get install slirp4netns; "
                             "scripts/setup.sh installs it)")
    return path


@functools.lru_cache(maxsize=1)
def slirp_resolv_conf() -> str:
    """A resolv.conf naming slirp4netns's DNS forwarder, bound read-only over a public-network
    sandbox's /etc/resolv.conf: the host's own would name resolvers on the host's loopback (a
    systemd-resolved stub), which the sandbox cannot reach and must not. Written once per process
    in a directory of its own that any uid can read (a sandbox's bwrap runs as the session's uid)."""
    import atexit
    import tempfile

    folder = tempfile.mkdtemp(prefix="tf-resolv-")
    os.chmod(folder, 0o755)
    path = os.path.join(folder, "resolv.conf")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    with os.fdopen(fd, "w") as f:
        f.write(f"nameserver {SLIRP_DNS}\noptions edns0\n")
    atexit.register(shutil.rmtree, folder, True)
    return path


_LOOPBACK_LOCAL = re.compile(r"\b127\.0\.0\.1\s+/32 host LOCAL")


def _loopback_up(pid: int, sandbox: subprocess.Popen, deadline: float) -> bool:
    """Wait until bwrap has set the sandbox's loopback up (127.0.0.1's local route is in its
    namespace), False if bwrap ended first. bwrap reports the pid right after clone, while its
    child still configures lo over netlink; slirp4netns --configure sets lo up too, and the two at
    once make bwrap fail ("loopback: Failed RTM_NEWADDR"), so slirp4netns starts only after."""
    while True:
        try:
            with open(f"/proc/{pid}/net/fib_trie") as f:
                if _LOOPBACK_LOCAL.search(f.read()):
                    return True
        except OSError:
            pass
        if sandbox.poll() is not None:
            return False
        if time.monotonic() > deadline:
            raise TermforgeError("sandbox network: bwrap did not set the sandbox's loopback up in time")
        time.sleep(0.002)


def _tun_open_to_all() -> bool:
    try:
        return os.stat("/dev/net/tun").st_mode & 0o006 == 0o006
    except OSError:
        return False


class PublicNetwork:
    """A sandbox's "public" network, as a container engine's bridge gives it, rootless: the sandbox
    gets a network namespace of its own (bwrap --unshare-net) and slirp4netns, on the host, connects
    it to the outside through user-mode NAT. Sharing the host's namespace instead would let task
    code reach every service on the host's 127.0.0.1 and every abstract unix socket of the host
    (those are per network namespace); slirp4netns runs with --disable-host-loopback, so 10.0.2.2
    (its gateway) does not lead to the host's loopback either.

    Use: `argv = net.argv(argv)`, start it with `net.fds` passed, then `net.connect(proc)`, and
    `net.close()` once the sandbox ended (or was killed). bwrap reports the sandbox's pid on
    --info-fd and waits on --block-fd before it executes the command, so the command never runs
    before the namespace has its tap device, address, route and DNS. slirp4netns runs in a
    session of its own (a timeout's kill of the sandbox's process group does not reach it) and
    ends when `close` closes its --exit-fd, or is killed if it lingers: it is always reaped here,
    whatever ended the sandbox; if this process dies, the exit fd closes with it."""

    def __init__(self, uid: int | None = None):
        self.program = slirp4netns_path()
        self.uid = uid
        self.proc = None
        self._info_r, self._info_w = os.pipe()
        self._block_r, self._block_w = os.pipe()
        self._exit_r = self._exit_w = None
        self._log = None
        # All four are close-on-exec: the child's two ends reach bwrap only through pass_fds.

    @property
    def fds(self) -> tuple[int, int]:
        return (self._info_w, self._block_r)

    def argv(self, argv: list[str]) -> list[str]:
        if not argv or Path(argv[0]).name != "bwrap":
            raise TermforgeError("sandbox network: a public network needs a bwrap sandbox")
        return [argv[0], "--info-fd", str(self._info_w), "--block-fd", str(self._block_r), *argv[1:]]

    def _child_ends_closed(self) -> None:
        for name in ("_info_w", "_block_r"):
            fd = getattr(self, name)
            if fd is not None:
                os.close(fd)
                setattr(self, name, None)

    def _read_pid(self, deadline: float) -> int | None:
        """The sandbox's pid from bwrap's --info-fd (JSON), or None when bwrap ended before it."""
        import json

        data = b""
        while b"}" not in data:
            ready, _, _ = select.select([self._info_r], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise TermforgeError("sandbox network: bwrap did not report the sandbox's pid in time")
            chunk = os.read(self._info_r, 4096)
            if not chunk:
                return None
            data += chunk
        return int(json.loads(data.decode())["child-pid"])

    def connect(self, sandbox: subprocess.Popen) -> None:
        """Connect the started sandbox's namespace, then let its command run. A sandbox whose
        network cannot be connected is killed and the failure raised (TermforgeError)."""
        self._child_ends_closed()
        deadline = time.monotonic() + NETWORK_UP_SEC
        try:
            pid = self._read_pid(deadline)
            if pid is None:
                return  # bwrap failed before the sandbox existed: its own error says why
            if not _loopback_up(pid, sandbox, deadline):
                return  # bwrap ended while setting the sandbox up: its own error says why
            self.attach(pid, deadline)
        except BaseException:
            try:
                os.killpg(sandbox.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.close()
            raise
        finally:
            if self._info_r is not None:
                os.close(self._info_r)
                self._info_r = None
        os.write(self._block_w, b"1")  # the namespace is up: bwrap may execute the command
        os.close(self._block_w)
        self._block_w = None

    def attach(self, pid: int, deadline: float | None = None) -> None:
        """Start slirp4netns on the network namespace process `pid` is in, and wait until it is
        configured (the Dockerfile build's, whose process is not a bwrap sandbox, uses it alone)."""
        import fcntl
        import tempfile

        # The sandbox's network namespace, and the user namespace that owns it, handed to
        # slirp4netns as descriptors: bwrap makes the network namespace in one user namespace and
        # may run the command in another, nested one (which cannot enter it), so the owner is asked
        # of the namespace itself (NS_GET_USERNS), never guessed from the pid.
        netns = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        try:
            userns = fcntl.ioctl(netns, NS_GET_USERNS)
        except BaseException:
            os.close(netns)
            raise
        ready_r, ready_w = os.pipe()
        self._exit_r, self._exit_w = os.pipe()
        # Its messages go to a file, not a pipe nobody reads (a full pipe would stall it).
        self._log = tempfile.TemporaryFile()
        # It runs as the session's uid (which owns the sandbox's user namespaces) where that uid may
        # open /dev/net/tun (mode 0666, as Debian makes it); a host whose tun device is root's alone
        # keeps it as this process's uid. Either way it confines itself (--enable-sandbox: an
        # empty root, no capabilities; --enable-seccomp) before it handles a packet.
        uid = self.uid if self.uid is not None and _tun_open_to_all() else None

        def drop() -> None:
            if uid is not None:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)

        try:
            self.proc = subprocess.Popen(
                [self.program, "--configure", "--mtu", SLIRP_MTU, "--disable-host-loopback", "--enable-sandbox",
                 "--enable-seccomp", "--ready-fd", str(ready_w), "--exit-fd", str(self._exit_r),
                 "--netns-type", "path", "--userns-path", f"/proc/self/fd/{userns}", f"/proc/self/fd/{netns}",
                 "tap0"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._log,
                pass_fds=(ready_w, self._exit_r, netns, userns), start_new_session=True, env={}, preexec_fn=drop)
        finally:
            for fd in (ready_w, self._exit_r, netns, userns):
                os.close(fd)
            self._exit_r = None
        deadline = time.monotonic() + NETWORK_UP_SEC if deadline is None else deadline
        try:
            ready, _, _ = select.select([ready_r], [], [], max(0.0, deadline - time.monotonic()))
            if not ready or os.read(ready_r, 1) != b"1":
                self._kill_slirp()
                self._log.seek(0)
                err = self._log.read(65536).decode(errors="replace").strip().splitlines()
                raise TermforgeError(f"sandbox network: slirp4netns did not connect the sandbox "
                                     f"({'; '.join(err[-3:]) if err else 'no reason given'})")
        finally:
            os.close(ready_r)

    def _kill_slirp(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                self.proc.kill()
            except ProcessLookupError:
                pass
        self.proc.wait()

    def close(self) -> None:
        """End slirp4netns (its exit fd closed, then killed if it lingers) and reap it."""
        self._child_ends_closed()
        for name in ("_info_r", "_block_w", "_exit_w"):
            fd = getattr(self, name)
            if fd is not None:
                os.close(fd)
                setattr(self, name, None)
        if self.proc is not None:
            try:
                self.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self._kill_slirp()
            self.proc = None
        if self._log is not None:
            self._log.close()
            self._log = None


# System V shared memory and message queues, and POSIX message queues, are memory that no file
# and no rlimit counts (an agent held 1,280 MiB of SysV segments under disk_mb: 64, each detached
# after writing it). Their limits are per IPC namespace: a sandbox gets one of its own, made by
# its parent while still root, with these set (the grade pool's zygote sets the same).
CLONE_NEWIPC = 0x08000000
IPC_PAGE = 4096


def ipc_limits(limits: Limits) -> dict[str, int]:
    """/proc/sys settings (relative paths) of a sandbox's own IPC namespace: SysV shared memory
    up to `tmp_mb` in all, a few small message queues."""
    shm = limits.tmp_mb * 1024 * 1024
    return {"kernel/shmmax": shm, "kernel/shmall": shm // IPC_PAGE, "kernel/shmmni": 64, "kernel/msgmni": 16,
            "fs/mqueue/queues_max": 16}


def _enter_ipc_namespace(settings: dict[str, int]) -> None:
    import ctypes

    if ctypes.CDLL(None, use_errno=True).unshare(CLONE_NEWIPC) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWIPC)")
    for key, value in settings.items():
        with open(f"/proc/sys/{key}", "w") as f:
            f.write(str(value))


@functools.lru_cache(maxsize=1)
def own_ipc_namespaces() -> bool:
    """Whether this process can give sandboxes IPC namespaces with limits (root with
    CAP_SYS_ADMIN and a writable /proc/sys): tried once, in a child."""
    if os.geteuid() != 0:
        return False
    pid = os.fork()
    if pid == 0:
        try:
            _enter_ipc_namespace(ipc_limits(Limits()))
            os._exit(0)
        except BaseException:  # noqa: BLE001 - any failure means: leave it to bwrap
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def _limit_preexec(limits: Limits, uid: int | None = None, cgroup: accounting.SandboxCgroup | None = None,
                   ipc: dict[str, int] | None = None, netns: tuple[NetworkNamespace, int] | None = None):
    def apply() -> None:
        if netns is not None:
            netns[0].enter(netns[1])  # before dropping root: entering a namespace needs the capability
        if cgroup is not None:
            cgroup.join()  # before dropping root: the cgroup is the caller's
        if ipc is not None:
            _enter_ipc_namespace(ipc)  # before dropping root: bwrap keeps it (sandbox_argv own_ipc)
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_sec, limits.cpu_sec + 5))
        mem = limits.memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_NOFILE, (limits.max_open_files, limits.max_open_files))
        fsize = limits.max_file_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
        if uid is not None:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            # Set after dropping root; the session's uid is its own, so the count is the sandbox's.
            # (Without a uid of its own, `nproc_prefix` sets it inside the sandbox instead: there
            # it counts the sandbox's processes, not every process of the caller.)
            resource.setrlimit(resource.RLIMIT_NPROC, (limits.max_procs, limits.max_procs))

    return apply


def nproc_prefix(limits: Limits, uid: int | None) -> list[str]:
    """The process-count limit set inside the sandbox (after bwrap made its user namespace), for
    sessions that share the caller's uid."""
    if uid is not None or not os.path.exists("/usr/bin/prlimit"):
        return []
    return ["/usr/bin/prlimit", f"--nproc={limits.max_procs}", "--"]


def allocated_bytes(roots: list[Path]) -> int:
    """Disk blocks held under `roots` (sparse files count what they really occupy)."""
    return trees.allocated([Path(r) for r in roots]).bytes


class DiskWatch:
    """Kills a sandbox once its writable layer outgrows the cap. Polls, so a fast writer may
    overshoot by what it writes in one interval; RLIMIT_FSIZE bounds each single file.

    The cap cannot be switched off by what the sandbox writes: a tree the watcher cannot measure
    within its bounds (too deep, too many entries, unreadable, too slow) kills the sandbox too,
    with that reason, and so does any error of the watcher itself."""

    INTERVAL = 0.2

    def __init__(self, roots: list[Path], cap_mb: int, pid: int | None, bounds: trees.Bounds | None = None,
                 kill=None):
        """Kills process group `pid`, or calls `kill()` (a sandbox that is no child of ours)."""
        self.roots, self.cap, self.pid = [Path(r) for r in roots], cap_mb * 1024 * 1024, pid
        self.kill = kill
        self.bounds = bounds or trees.DEFAULT_BOUNDS
        self.hit = False
        self.reason: str | None = None
        self.unmeasurable = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if self.roots:
            self._thread = accounting.start_thread(self._run)

    def _check(self) -> str | None:
        try:
            m = trees.allocated(self.roots, self.bounds)
        except Exception as exc:  # noqa: BLE001 - a watcher that cannot measure must still stop the writer
            self.unmeasurable = True
            return f"the writable layer could not be measured ({type(exc).__name__}: {exc})"
        if m.bytes > self.cap:
            return f"the writable layer grew past {self.cap // (1024 * 1024)} MiB"
        if m.incomplete:
            self.unmeasurable = True
            return f"the writable layer could not be measured: {m.incomplete}"
        return None

    def _run(self) -> None:
        while not self._stop.wait(self.INTERVAL):
            why = self._check()
            if why is None:
                continue
            self.hit, self.reason = True, why
            try:
                if self.kill is not None:
                    self.kill()
                else:
                    os.killpg(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError, OSError):
                pass
            return

    def stop(self) -> None:
        """Stop watching, after one last measurement: a sandbox that wrote past the cap and ended
        within one interval is over its limit all the same (its /tmp and /dev/shm, removed with
        it, would otherwise never be counted)."""
        self._stop.set()
        if self._thread is not None and self._thread.is_alive():
            self._thread.join()
        if self._thread is not None and not self.hit:
            why = self._check()
            if why is not None:
                self.hit, self.reason = True, why


def limit_reason(code: int, limits: Limits, disk_hit: bool | str | None) -> str | None:
    if isinstance(disk_hit, str):
        return f"disk: {disk_hit}"
    if disk_hit:
        return f"disk: the writable layer grew past {limits.disk_mb} MiB"
    if code == FSIZE_EXIT:
        return f"file size: a file grew past {limits.max_file_mb} MiB"
    return None

