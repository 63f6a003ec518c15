"""The grader zygote: one Python that has imported pytest (and nothing of any task), forking a
fresh grader per grade, each in a fresh sandbox of its own (docs/grading.md, "The grader
zygote"). Run inside a bwrap sandbox over the task's image as

    python3 -I /verifier/zygote.py CONTROL_FD

Why: starting Python and importing pytest is most of what a grade costs (about 130 of 180 ms of
CPU on a two-core machine), and validation grades each task about 16 times. A fork of this
process has pytest imported already; everything else about the grade is what bwrap gives a grader:

    zygote (bwrap sandbox: the image as /, host work directory at /mnt, CAP_SYS_ADMIN,
      |     CAP_NET_ADMIN and CAP_SETPCAP in its own user namespace and nothing else)
      +- A  per request: new mount, pid, ipc, net, uts and cgroup namespaces; waits, enforces the
            |  timeout, reports the exit status and CPU on the request's reply socket
            +- B  pid 1 of the new pid namespace: builds the grader's root as bwrap would (the image
                  |  read-only as /, fresh /dev, /proc, a size-capped /tmp, the session's layer at
                  |  /app, the per-run /tests, /logs and /verifier), pivots into it (the host's work
                  |  directory is gone), brings up loopback, drops every capability, sets the
                  |  limits, then reaps as init and exits with the grader's status
                  +- C  pid 2: a new session and a user namespace of its own (fresh keyrings, no
                        capabilities), the grader's environment, cwd and argv, the boot socket of
                        the grade channel as its only extra descriptor; runs grade.py's main()

A request is one SOCK_SEQPACKET message on CONTROL_FD: JSON (binds, env, cwd, argv, limits,
timeout) and four descriptors (the grade channel's boot socket, stdout and stderr pipes, the reply
socket). Nothing a grade runs can reach the zygote or A: they are outside its pid namespace, hold
no descriptor it has, and the zygote has read nothing of any task. Standard library only: this
runs on the image's python3.
"""

import array
import ctypes
import gc
import importlib.util
import json
import os
import resource
import select
import signal
import socket
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_SILENT = 32, 4096, 16384, 32768
MS_PRIVATE = 1 << 18
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP = 1, 4, 24
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
SANDBOX_UID = 1000
# What bwrap --dev provides: device nodes bound from the outer /dev, and these links.
DEV_NODES = ("null", "zero", "full", "random", "urandom", "tty")
DEV_LINKS = (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
             ("stderr", "/proc/self/fd/2"), ("core", "/proc/kcore"), ("ptmx", "pts/ptmx"))
# What bwrap --proc covers read-only.
PROC_RO = ("sys", "sysrq-trigger", "irq", "bus")
NEWROOT = "/tmp/newroot"
# The zygote's own mounts: never carried into a grader's root (build_root).
ZYGOTE_MOUNTS = ("dev", "proc", "tmp", "mnt", "verifier")
# B's status when it could not build the sandbox: no grader ran (grading/gradepool.py SETUP_FAILED).
SETUP_FAILED = 125
# How the host runs termforge's grader (grading/gradepool.py GRADER_PREFIX).
GRADER_ARGV = ["/usr/bin/python3", "-I", "/verifier/grade.py"]

libc = ctypes.CDLL(None, use_errno=True)
libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
libc.pivot_root.argtypes = [ctypes.c_char_p, ctypes.c_char_p]


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _check(ret, what):
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(src, target, fstype, flags, data=None):
    enc = (lambda s: None if s is None else s.encode())
    _check(libc.mount(enc(src), enc(target), enc(fstype), flags, enc(data)), f"mount {target}")


def _unshare(flags):
    _check(libc.unshare(flags), "unshare")


def _bind(src, target, readonly, devices=False, recursive=True):
    """bwrap's --bind / --ro-bind: recursive, then nosuid (and nodev unless devices) and ro."""
    _mount(src, target, None, MS_BIND | (MS_REC if recursive else 0) | MS_SILENT)
    flags = MS_BIND | MS_REMOUNT | MS_NOSUID | (0 if devices else MS_NODEV) | (MS_RDONLY if readonly else 0)
    _mount(None, target, None, flags)


def _prctl(option, arg2=0, arg3=0):
    _check(libc.prctl(option, arg2, arg3, 0, 0), f"prctl {option}")


def drop_capabilities():
    """No capability left in any set: bounding, ambient, effective, permitted, inheritable."""
    try:
        last = int(open("/proc/sys/kernel/cap_last_cap").read())
    except (OSError, ValueError):
        last = 63
    for cap in range(last + 1):
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = _CapHeader(0x20080522, 0)
    data = (_CapData * 2)()
    _check(libc.capset(ctypes.byref(header), data), "capset")


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


def _loopback_up():
    """bwrap --unshare-net gives a loopback that is up (127.0.0.1 and ::1 come with it)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        import fcntl

        req = bytearray(b"lo".ljust(16, b"\0") + bytes(24))
        fcntl.ioctl(s.fileno(), SIOCGIFFLAGS, req)
        flags = int.from_bytes(req[16:18], sys.byteorder) | IFF_UP
        req[16:18] = flags.to_bytes(2, sys.byteorder)
        fcntl.ioctl(s.fileno(), SIOCSIFFLAGS, req)
    finally:
        s.close()


def build_root(spec):
    """The grader's root filesystem, as bwrap builds it for a grader run (runtime.bwrap
    sandbox_argv with the image as /): called in B, pid 1 of the new pid namespace."""
    _mount(None, "/", None, MS_REC | MS_PRIVATE | MS_SILENT)
    _mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
    os.mkdir(NEWROOT)
    # --ro-bind ROOTFS /: the image's root filesystem, read-only. "/" itself cannot be bound
    # without what is mounted below it here (bwrap made those mounts in an outer user namespace:
    # they are locked to it), so the new root is a tmpfs holding the image's top-level entries,
    # each bound read-only; the zygote's own mounts (/dev, /proc, /tmp, the host's work directory
    # at /mnt, /verifier) are left out and made fresh or empty. Read-only once all is mounted.
    _mount("tmpfs", NEWROOT, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
    # Mount points the grade's own binds cover (/app, /tests, /logs, /verifier): empty directories.
    covered = {target.strip("/") for _, target, _ in spec["binds"] if target.count("/") == 1}
    for name in sorted(os.listdir("/")):
        src, dst = "/" + name, f"{NEWROOT}/{name}"
        if os.path.islink(src):
            os.symlink(os.readlink(src), dst)
        elif name in ZYGOTE_MOUNTS or name in covered or not os.path.isdir(src):
            if os.path.isdir(src):
                os.mkdir(dst, 0o755)
            elif os.path.isfile(src):
                open(dst, "w").close()
                _bind(src, dst, readonly=True)
        else:
            os.mkdir(dst, 0o755)
            _bind(src, dst, readonly=True)
    # --dev /dev
    dev = NEWROOT + "/dev"
    _mount("tmpfs", dev, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
    for node in DEV_NODES:
        open(f"{dev}/{node}", "w").close()
        _bind(f"/dev/{node}", f"{dev}/{node}", readonly=False, devices=True)
    for name, target in DEV_LINKS:
        os.symlink(target, f"{dev}/{name}")
    os.mkdir(f"{dev}/shm", 0o755)  # the grade's /dev/shm is one of its binds (from its session's tree)
    os.mkdir(f"{dev}/pts", 0o755)
    _mount("devpts", f"{dev}/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=620")
    # --proc /proc (this process is pid 1 of the new pid namespace: the new proc shows only it)
    proc = NEWROOT + "/proc"
    _mount("proc", proc, "proc", MS_NOSUID | MS_NOEXEC | MS_NODEV)
    for sub in PROC_RO:
        if os.path.exists(f"{proc}/{sub}"):
            try:
                _bind(f"{proc}/{sub}", f"{proc}/{sub}", readonly=True)
            except OSError:
                pass
    # /tmp and /dev/shm are binds of directories in the session's tree (runtime.bwrap.Scratch),
    # so that everything a grade writes counts against its session's disk_mb.
    targets = {target for _, target, _ in spec["binds"]}
    if not {"/tmp", "/dev/shm"} <= targets:
        raise OSError("the grade's /tmp and /dev/shm are not among its binds")
    # --dir /home/user: the image's own (empty, read-only) directory; the image provides it.
    for src, target, writable in spec["binds"]:
        if not src.startswith("/mnt/") or ".." in src.split("/"):
            raise OSError(f"bind source {src!r} is outside the work directory")
        _bind(src, NEWROOT + target, readonly=not writable)
    # --remount-ro /dev: nothing of the grade's may write into /dev's own tmpfs (of no size).
    _mount(None, dev, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    _mount(None, NEWROOT, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    os.chdir(NEWROOT)
    _check(libc.pivot_root(b".", b"."), "pivot_root")
    _check(libc.umount2(b".", MNT_DETACH), "umount old root")
    os.chdir("/")


def set_limits(limits):
    for name, (soft, hard) in limits.items():
        resource.setrlimit(getattr(resource, name), (soft, hard))


def grader(spec, boot, grade_main):
    """C: the fresh grader. Never returns."""
    code = 3
    try:
        os.setsid()
        # Dumpable again, as any process bwrap starts is (the zygote is not: nothing of its own
        # uid may ptrace it); a non-dumpable process cannot write its own uid_map.
        _prctl(PR_SET_DUMPABLE, 1)
        _unshare(CLONE_NEWUSER)
        _write("/proc/self/uid_map", f"{SANDBOX_UID} {SANDBOX_UID} 1\n")
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/gid_map", f"{SANDBOX_UID} {SANDBOX_UID} 1\n")
        drop_capabilities()
        _prctl(PR_SET_DUMPABLE, 1)  # the user namespace's new credentials cleared it; bwrap's child has it
        env = dict(spec["env"])
        env[spec["channel_env"]] = str(boot)
        env["PWD"] = spec["cwd"]  # bwrap --chdir sets it
        os.environ.clear()
        os.environ.update(env)
        os.chdir(spec["cwd"])
        sys.argv = list(spec["argv"][2:])  # python3 -I /verifier/grade.py ARG... -> [grade.py, ARG...]
        code = grade_main(sys.argv[1:])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - a grader that cannot start reports like a crashed one
        import traceback

        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code if isinstance(code, int) else 1)


def init(spec, boot, out, err, grade_main):
    """B: pid 1 of the grade's pid namespace. Never returns."""
    try:
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        null = os.open("/dev/null", os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out, 1)
        os.dup2(err, 2)
        for fd in (null, out, err):
            if fd > 2:
                os.close(fd)
        build_root(spec)
        _loopback_up()
        drop_capabilities()
        set_limits(spec["rlimits"])
        sys.stdout.flush()
        sys.stderr.flush()
        child = os.fork()
    except BaseException:  # noqa: BLE001 - the sandbox could not be made: no grader ran
        import traceback

        traceback.print_exc()
        os._exit(SETUP_FAILED)
    if child == 0:
        grader(spec, boot, grade_main)
    code = 1
    try:
        os.close(boot)
        while True:  # reap as init until the grader ends; its status is the sandbox's
            pid, status = os.waitpid(-1, 0)
            if pid == child:
                code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)
                break
    finally:
        os._exit(code)


def supervise(spec, fds, grade_main, zygote_cpu, made_ahead=False):
    """A: new namespaces, then B; waits for it within the timeout; reports. Never returns."""
    boot, out, err, reply = fds
    report = {"status": None, "timed_out": False, "error": None, "zygote_cpu": zygote_cpu, "made_ahead": made_ahead}
    try:
        _unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWNET | CLONE_NEWUTS | CLONE_NEWCGROUP)
        pid = os.fork()
    except BaseException as exc:  # noqa: BLE001 - nothing ran: the host falls back
        report["error"] = f"{type(exc).__name__}: {exc}"
        _report(reply, report)
    if pid == 0:
        os.close(reply)
        init(spec, boot, out, err, grade_main)
    try:
        for fd in (boot, out, err):
            os.close(fd)
        pidfd = os.pidfd_open(pid)
        deadline = _now() + float(spec["timeout"])
        while True:
            left = deadline - _now()
            if left <= 0:
                os.kill(pid, signal.SIGKILL)
                report["timed_out"] = True
                break
            ready, _, _ = select.select([pidfd, reply], [], [], left)
            if reply in ready:
                msg = os.read(reply, 64)
                if msg == b"kill" or not msg:  # the host's disk watch, or the host went away
                    os.kill(pid, signal.SIGKILL)
            if pidfd in ready:
                break
    except BaseException:  # noqa: BLE001 - the grade may have run: end it, report it killed
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    _, status = os.waitpid(pid, 0)
    report["status"] = os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)
    _report(reply, report)


def _report(reply, report):
    """A's last act: its own and its children's CPU, and the report, on the reply socket."""
    ru_self = resource.getrusage(resource.RUSAGE_SELF)
    ru_kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    report["cpu"] = ru_self.ru_utime + ru_self.ru_stime + ru_kids.ru_utime + ru_kids.ru_stime
    try:
        os.write(reply, json.dumps(report).encode())
    except OSError:
        pass
    os._exit(0)


def _cpu():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _now():
    import time

    return time.monotonic()


def _recv(control):
    fds = array.array("i")
    msg, anc, _, _ = control.recvmsg(1 << 20, socket.CMSG_SPACE(8 * fds.itemsize))
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    return msg, list(fds)


def serve(control_fd):
    _prctl(PR_SET_DUMPABLE, 0)
    spec_ = importlib.util.spec_from_file_location("_termforge_grade", "/verifier/grade.py")
    grade = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(grade)
    import pytest  # noqa: F401 - the point of the zygote: every grader forked from here has it
    # pytest.main imports the modules of its built-in plugins when it first makes a config: once
    # here rather than in every grader (about 10 ms of a 55 ms grade). pytest's own code only.
    from _pytest.config import default_plugins, essential_plugins

    for name in (*essential_plugins, *default_plugins):
        try:
            importlib.import_module("_pytest." + name)
        except ImportError:
            pass

    # Every object made so far stays out of the collector's way: a grader's collections would
    # otherwise touch (and so copy) the pages of every one of them.
    gc.freeze()
    control = socket.socket(fileno=control_fd)
    control.set_inheritable(False)
    control.sendall(json.dumps({"ready": True, "cpu": _cpu()}).encode())
    while True:
        try:
            msg, fds = _recv(control)
        except OSError:
            return
        if not msg:
            return  # the host closed the pool
        while True:  # reap finished supervisors
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
        if len(fds) != 4:
            for fd in fds:
                os.close(fd)
            continue
        spec = json.loads(msg.decode())
        argv = spec.get("argv") or []
        made_ahead = False
        if argv[:3] == GRADER_ARGV and argv[3:4] not in (["--request"], ["--supervise"]):
            try:
                made_ahead = grade.prepare(argv[3:])
            except Exception:  # noqa: BLE001 - nothing made ahead: the grader makes it all
                pass
        sys.stdout.flush()
        sys.stderr.flush()
        cpu = _cpu()
        pid = os.fork()
        if pid == 0:
            control.close()
            low = 3
            for fd in sorted(fds) + [resource.getrlimit(resource.RLIMIT_NOFILE)[0]]:
                os.closerange(low, fd)
                low = fd + 1
            supervise(spec, fds, grade.main, cpu, made_ahead)
        for fd in fds:
            os.close(fd)


if __name__ == "__main__":
    serve(int(sys.argv[1]))
