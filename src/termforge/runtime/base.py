"""The runtime interface (README, "Sandboxing and grading"): where untrusted task code runs.

build(task_dir) -> image; start(image) -> Session; Session.exec(cmd, timeout) with the real exit
code; copy_in/copy_out; stop(). Backends: bwrap (default, CI), apptainer (clusters), docker.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Bind:
    """A host path made visible inside a sandbox (read-only unless writable)."""

    host: Path
    sandbox: str
    writable: bool = False


@dataclass
class Limits:
    """Resource limits applied to every process a session starts (config: `runtime.limits`).

    Hitting one is the sandboxed program's failure (a 0 with a reason), never the host's: the
    process count, open files and file size are rlimits of the sandbox's own uid; everything the
    sandbox can write (/app, /home/user, /tmp, /dev/shm, writable binds: all directories of its
    session on the work root, /dev itself read-only) is watched as one and the sandbox killed
    when it grows past `disk_mb` together, or when it holds a tree deeper than `tree_depth`
    levels or larger than `tree_entries` entries (which the watcher could not measure). `tmp_mb`
    caps the sandbox's System V shared memory (runtime.bwrap.ipc_limits) and sizes /tmp and
    /dev/shm only where a sandbox is made outside a session (sandbox_argv)."""

    wall_sec: float = 120.0
    cpu_sec: int = 120
    memory_mb: int = 2048
    max_procs: int = 256
    max_open_files: int = 1024
    max_file_mb: int = 512
    disk_mb: int = 1024
    tmp_mb: int = 256
    # How far the host walks what a sandbox wrote (disk watch, cleanup checks, log scans): a tree
    # deeper or larger than this cannot be measured, which kills the sandbox (runtime/trees.py).
    tree_depth: int = 128
    tree_entries: int = 200_000

    @classmethod
    def from_options(cls, o: dict) -> "Limits":
        """From a stage's flat options (`runtime.*` keys), with `runtime.limits` optional."""
        extra = dict(o.get("runtime.limits") or {})
        return cls(wall_sec=o["runtime.exec_timeout_sec"], cpu_sec=o["runtime.cpu_sec"],
                   memory_mb=o["runtime.memory_mb"], **extra)


@dataclass
class ExecResult:
    exit_code: int
    stdout: str
    stderr: str
    duration_sec: float
    timed_out: bool = False
    limit_hit: str | None = None  # which resource limit ended the run, if one did

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    def tail(self, n: int = 2000) -> str:
        text = (self.stdout + ("\n" if self.stdout and self.stderr else "") + self.stderr).strip()
        return text[-n:]


@dataclass
class Image:
    """A built task environment. For bwrap it is a directory holding the task layer (/app) and
    image.json; `rootfs` is the base image's root filesystem that sessions bind read-only as `/`
    (or "host": the host's /usr and /etc, only where `runtime.rootfs: host` was chosen)."""

    task_id: str
    backend: str
    path: Path
    digest: str
    allow_network: bool = False
    meta: dict = field(default_factory=dict)
    rootfs: str = ""


@dataclass
class BuildResult:
    ok: bool
    image: Image | None
    reason: str
    log: str
    duration_sec: float
    cached: bool = False
    # The builder failed for its own reason (termforge.images.dockerfile.BuilderError): an
    # infrastructure error, never a verdict on the task's environment.
    infra: bool = False


class Session:
    """One running environment over a private copy of an image's layer."""

    def exec(self, command: str, timeout: float | None = None, env: dict | None = None,
             cwd: str = "/app") -> ExecResult:  # pragma: no cover - interface
        raise NotImplementedError

    def copy_in(self, src: Path, dst: str) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def copy_out(self, src: str, dst: Path) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def stop(self) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


class Runtime:
    name = "base"

    def build(self, task_dir: Path, images_dir: Path, timeout: float = 600) -> BuildResult:  # pragma: no cover
        raise NotImplementedError

    def start(self, image: Image, limits: Limits | None = None) -> Session:  # pragma: no cover
        raise NotImplementedError


def task_image(runtime: Runtime, images_dir: Path, task_dir: Path) -> Image:
    """A task's built image: loaded from the images folder where the backend keeps one per task,
    else built (backends cache their builds)."""
    task_dir = Path(task_dir)
    if hasattr(runtime, "load"):
        return runtime.load(images_dir, task_dir.name)
    built = runtime.build(task_dir, images_dir)
    if not built.ok or built.image is None:
        from termforge.errors import TermforgeError

        raise TermforgeError(f"task {task_dir.name}: its image did not build ({built.reason})")
    return built.image
