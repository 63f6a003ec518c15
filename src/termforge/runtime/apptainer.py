"""Apptainer runtime (clusters): the task's base image (the same declared or derived base the
bwrap runtime runs, termforge.images) as a SIF built from the image store's OCI layout
(`apptainer build base.sif oci://<store>:<name>`), one content-addressed SIF per task layered on
it, every run `--containall --no-home --cleanenv`, no network unless the task declares it, and a
fresh writable overlay per session.

Apptainer is not installable on the termforge CI machines: everything here is tested up to the
command line it runs, and tests/test_apptainer.py runs it for real wherever `apptainer` exists.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from termforge.containment import check_task_id, contained
from termforge.errors import TermforgeError
from termforge.io import atomic_write_json, atomic_write_text, read_json, stable_hash
from termforge.runtime.base import Bind, BuildResult, ExecResult, Image, Limits, Runtime, Session
from termforge.runtime import trees
from termforge.runtime.bwrap import run_sandboxed, tree_digest



def dockerfile_to_def(dockerfile: Path) -> str:
    """Convert a Dockerfile (Terminal-Bench tasks) to an Apptainer definition with spython."""
    from spython.main.parse.parsers import DockerParser
    from spython.main.parse.writers import SingularityWriter

    # The parser parses on construction; calling parse() again would duplicate every section.
    recipe = DockerParser(str(dockerfile)).recipe
    return SingularityWriter(recipe).convert()


def layer_on_base(definition: str, base_sif: Path) -> str:
    """Replace the def's bootstrap header so the task builds on its (already built) base SIF.
    The packages of the base are then cached in the base, not re-installed per task."""
    body = re.sub(r"(?im)^\s*(Bootstrap|From|Stage)\s*:.*\n", "", definition)
    return f"Bootstrap: localimage\nFrom: {base_sif}\n\n{body.lstrip()}"


class ApptainerRuntime(Runtime):
    name = "apptainer"

    def __init__(self, images_root: str | Path | None = None, apptainer: str = "apptainer",
                 dry_run: bool | None = None, image_cache: str | Path | None = None, store=None):
        self.apptainer = apptainer
        self.image_cache = image_cache
        self.store = store
        self.images_root = Path(images_root) if images_root else None
        self.dry_run = shutil.which(apptainer) is None if dry_run is None else dry_run
        self.commands: list[list[str]] = []  # every command line run (or, in a dry run, planned)
        self._planned_bases: set[Path] = set()

    # -- command lines -----------------------------------------------------------------------
    def build_argv(self, sif: Path, definition: Path | str) -> list[str]:
        return [self.apptainer, "build", "--fakeroot", "--force", str(sif), str(definition)]

    def overlay_argv(self, overlay: Path, size_mb: int = 1024) -> list[str]:
        return [self.apptainer, "overlay", "create", "--size", str(size_mb), str(overlay)]

    def exec_argv(self, image: Image, overlay: Path | None, command: str, binds: list[Bind] = (),
                  env: dict | None = None, cwd: str = "/app", argv_tail: list[str] | None = None) -> list[str]:
        argv = [self.apptainer, "exec", "--containall", "--no-home", "--cleanenv"]
        if not image.allow_network:
            argv += ["--net", "--network", "none"]
        argv += ["--overlay", str(overlay)] if overlay else ["--writable-tmpfs"]
        for b in binds:
            argv += ["--bind", f"{b.host}:{b.sandbox}:{'rw' if b.writable else 'ro'}"]
        for key, value in sorted((env or {}).items()):
            argv += ["--env", f"{key}={value}"]
        argv += ["--pwd", cwd, str(image.path / "image.sif")]
        return argv + (argv_tail or ["/bin/bash", "--noprofile", "--norc", "-c", command])

    def _run(self, argv: list[str], timeout: float, cwd: Path | None = None) -> ExecResult:
        self.commands.append(argv)
        if self.dry_run:
            return ExecResult(0, "", f"dry run: {' '.join(argv)}", 0.0)
        start = time.monotonic()
        try:
            res = subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=timeout, cwd=cwd)
        except subprocess.TimeoutExpired as exc:
            return ExecResult(124, exc.stdout or "", exc.stderr or "", time.monotonic() - start, True)
        return ExecResult(res.returncode, res.stdout, res.stderr, time.monotonic() - start)

    # -- builds ------------------------------------------------------------------------------
    def build_base(self, task: dict, images_dir: Path, timeout: float = 3600) -> tuple[Path, dict]:
        """The SIF of the task's base image and its record; built by the layer above
        (termforge.images.runtimes.ApptainerRuntime): a sandbox runtime builds no base images."""
        raise TermforgeError("this runtime builds no base images (termforge.images.runtimes.ApptainerRuntime does)")

    def build(self, task_dir: Path, images_dir: Path, timeout: float = 1800) -> BuildResult:
        task_dir = Path(task_dir)
        task = read_json(task_dir / "task.json")
        # The id comes from a file a generator wrote: the image goes where containment allows.
        task["id"] = check_task_id(task.get("id"), task_dir / "task.json")
        contained(images_dir, task["id"], where=task_dir / "task.json")
        env_dir = task_dir / "environment"
        start = time.monotonic()
        try:
            base, base_ref = self.build_base(task, images_dir)
        except TermforgeError as exc:
            reason = f"task {task['id']}: base image: {exc}"
            return BuildResult(False, None, reason, reason, time.monotonic() - start)
        if (env_dir / "container.def").exists():
            definition = (env_dir / "container.def").read_text()
        elif (env_dir / "Dockerfile").exists():
            definition = dockerfile_to_def(env_dir / "Dockerfile")
        else:
            reason = f"task {task['id']}: environment/ has neither container.def nor Dockerfile"
            return BuildResult(False, None, reason, reason, 0.0)
        digest = stable_hash([tree_digest(env_dir), base_ref["digest"]], 24)
        out = Path(images_dir) / task["id"]
        allow_network = bool(task.get("environment", {}).get("allow_network", False))
        image = Image(task["id"], self.name, out, digest, allow_network)
        meta = out / "image.json"
        if meta.exists() and read_json(meta).get("digest") == digest and (
                (out / "image.sif").exists() or read_json(meta).get("dry_run")):
            return BuildResult(True, image, "cached", "", 0.0, cached=True)
        out.mkdir(parents=True, exist_ok=True)
        def_path = out / "task.def"
        atomic_write_text(def_path, layer_on_base(definition, base))
        # %files paths in the def are relative to the environment directory: build from there.
        res = self._run(self.build_argv(out / "image.sif.tmp", def_path), timeout, cwd=env_dir)
        log = f"$ {' '.join(self.commands[-1])}\n{res.stdout}{res.stderr}"
        (out / "build.log").write_text(log)
        if not res.ok:
            return BuildResult(False, None, f"apptainer build failed: {res.tail(300)}", log, res.duration_sec)
        if not self.dry_run:
            (out / "image.sif.tmp").replace(out / "image.sif")
        atomic_write_json(meta, {"task_id": task["id"], "backend": self.name, "digest": digest,
                                 "allow_network": allow_network, "base_sif": str(base), "base": base_ref,
                                 "rootfs": "image", "dry_run": self.dry_run})
        return BuildResult(True, image, "built", log, time.monotonic() - start)

    def start(self, image: Image, limits: Limits | None = None) -> "ApptainerSession":
        return ApptainerSession(self, image, limits or Limits())


class ApptainerSession(Session):
    """One run of an image with its own writable overlay (discarded on stop)."""

    def __init__(self, runtime: ApptainerRuntime, image: Image, limits: Limits):
        self.runtime, self.image, self.limits = runtime, image, limits
        self.workdir = Path(tempfile.mkdtemp(prefix=f"tf-apptainer-{image.task_id}-"))
        self.overlay = self.workdir / "overlay.img"
        res = runtime._run(runtime.overlay_argv(self.overlay), 120)
        if not res.ok:
            raise TermforgeError(f"task {image.task_id}: could not create an overlay: {res.tail(300)}")

    def exec(self, command: str, timeout: float | None = None, env: dict | None = None, cwd: str = "/app",
             binds: list[Bind] = (), stdin: bytes | None = None, keep_home: bool = True,
             argv: list[str] | None = None, pass_fds: tuple[int, ...] = ()) -> ExecResult:
        # `argv` runs a program directly (the grader); `pass_fds` are inherited (its channel).
        full = self.runtime.exec_argv(self.image, self.overlay, command, binds, env, cwd, argv_tail=argv)
        self.runtime.commands.append(full)
        if self.runtime.dry_run:
            return ExecResult(0, "", f"dry run: {' '.join(full)}", 0.0)
        return run_sandboxed(full, timeout or self.limits.wall_sec, self.limits, stdin=stdin, pass_fds=pass_fds)

    def copy_in(self, src: Path, dst: str) -> None:
        self.exec(f"mkdir -p $(dirname {dst}) && cat > {dst}", stdin=Path(src).read_bytes())

    def copy_out(self, src: str, dst: Path) -> None:
        res = self.exec(f"cat {src}")
        Path(dst).write_text(res.stdout)

    def stop(self) -> None:
        trees.remove_tree(self.workdir)
