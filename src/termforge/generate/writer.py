"""Turn a TaskSpec into a canonical task directory, atomically (staging dir, then one rename)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from termforge.generate.base import BASE_APT_PACKAGES, ESSENTIAL_PACKAGES, FIXTURES_IN_SANDBOX, TaskSpec
from termforge.images.declarations import declared_packages
from termforge.io import StagedOutputs, pretty_json
from termforge.grading.verifier import TEST_SH

EXECUTABLE = 0o755
REGULAR = 0o644


def task_environment(environment: dict, spec: TaskSpec, base_image: str) -> dict:
    """task.json's `environment`: the base image it builds on, and the Debian packages it needs on
    top of that base (its own, plus what tasks take for granted when the base lacks it)."""
    have = set(declared_packages(base_image)) | set(ESSENTIAL_PACKAGES)
    apt = (set(spec.apt_packages) | set(BASE_APT_PACKAGES)) - have
    return {**environment, "base": base_image, "apt_packages": sorted(apt | set(spec.apt_packages))}


def container_def(spec: TaskSpec, base_image: str) -> str:
    """Apptainer definition for the same environment the bwrap runtime builds: the base image
    (docs/images.md: `apptainer build` from its OCI archive) plus the task's layer."""
    pkgs = " ".join(task_environment({}, spec, base_image)["apt_packages"])
    # Only what the base lacks: the Apptainer runtime builds on the derived base, which has them
    # all (and then needs no network); on the plain base they are installed here.
    install = (f"    missing=$(for p in {pkgs}; do dpkg -s \"$p\" >/dev/null 2>&1 || echo \"$p\"; done)\n"
               "    if [ -n \"$missing\" ]; then apt-get update && apt-get install -y --no-install-recommends "
               "$missing && rm -rf /var/lib/apt/lists/*; fi\n") if pkgs else ""
    return (
        f"Bootstrap: docker\nFrom: {base_image}\n\n"
        "%files\n"
        "    environment/setup.sh /tmp/env/setup.sh\n"
        "    environment/fixtures /tmp/env/fixtures\n\n"
        "%post\n"
        "    export DEBIAN_FRONTEND=noninteractive\n"
        f"{install}"
        "    mkdir -p /app /logs/verifier && cd /app && bash /tmp/env/setup.sh && rm -rf /tmp/env\n\n"
        "%environment\n"
        "    export LANG=C.UTF-8\n\n"
        "%runscript\n"
        "    cd /app && exec /bin/bash \"$@\"\n"
    )


def dockerfile(spec: TaskSpec, base_image: str) -> str:
    """The task's image as a Dockerfile: FROM the base as the image store names it (termforge
    images list), the task's extra packages, then setup.sh makes /app as the bwrap build does."""
    pkgs = " ".join(task_environment({}, spec, base_image)["apt_packages"])
    install = (f"RUN apt-get update && apt-get install -y --no-install-recommends {pkgs} "
               "&& rm -rf /var/lib/apt/lists/*\n") if pkgs else ""
    return (
        f"FROM {base_image}\n"
        "ENV DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8\n"
        f"{install}"
        "COPY setup.sh /tmp/env/setup.sh\n"
        "COPY fixtures /tmp/env/fixtures\n"
        "RUN mkdir -p /app /logs/verifier && cd /app && bash /tmp/env/setup.sh && rm -rf /tmp/env\n"
        "WORKDIR /app\n"
    )


def task_files(task_json: dict, spec: TaskSpec, base_image: str) -> dict[str, tuple[bytes, int]]:
    """Every file of the task directory: relative path -> (bytes, mode)."""
    task_json = {**task_json, "environment": task_environment(task_json.get("environment", {}), spec, base_image)}
    files: dict[str, tuple[bytes, int]] = {
        "task.json": (pretty_json(task_json).encode(), REGULAR),
        "instruction.md": (spec.instruction.encode(), REGULAR),
        "environment/setup.sh": (spec.setup_sh.encode(), EXECUTABLE),
        "environment/container.def": (container_def(spec, base_image).encode(), REGULAR),
        "environment/Dockerfile": (dockerfile(spec, base_image).encode(), REGULAR),
        "environment/fixtures/.keep": (b"", REGULAR),
        "tests/test_initial_state.py": (spec.test_initial.encode(), REGULAR),
        "tests/test_final_state.py": (spec.test_final.encode(), REGULAR),
        "tests/test.sh": (TEST_SH.encode(), EXECUTABLE),
        "solution/solve.sh": (spec.solve_sh.encode(), EXECUTABLE),
        "private/truth.json": (pretty_json(spec.truth).encode(), REGULAR),
        "private/method.md": ((spec.method_note.strip() + "\n").encode(), REGULAR),
    }
    for name, script in sorted(spec.alternatives.items()):
        if not re.fullmatch(r"[a-z0-9_-]+", name):
            raise ValueError(f"alternative solution name {name!r}: letters, digits, _ and - only")
        files[f"solution/alternatives/{name}.sh"] = (script.encode(), EXECUTABLE)
    for name, data in sorted(spec.test_data.items()):
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", name) or name.startswith(".") or name.endswith(".py") \
                or f"tests/{name}" in files:
            raise ValueError(f"test data file name {name!r}: one plain file name, not a test or a file the task has")
        files[f"tests/{name}"] = (data, REGULAR)
    for rel, data in spec.fixtures.items():
        if rel.startswith("/") or ".." in Path(rel).parts:
            raise ValueError(f"fixture path {rel!r} must be relative and stay under fixtures/")
        files[f"environment/fixtures/{rel}"] = (data, EXECUTABLE if data[:2] in (b"#!", b"\x7fE") else REGULAR)
    return files


def write_task_dir(final: Path, files: dict[str, tuple[bytes, int]]) -> None:
    """Write into a hidden staging sibling and publish with one rename: never a half-written task."""
    with StagedOutputs() as staged:  # a failure (a full disk) leaves no staging folder behind
        stage = staged.dir(final)
        for rel, (data, mode) in sorted(files.items()):
            path = stage / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            os.chmod(path, mode)
        # Fixed mtimes keep archives of the task directory byte-identical across runs.
        for path in sorted(stage.rglob("*"), reverse=True):
            os.utime(path, (0, 0), follow_symlinks=False)
        staged.publish()


__all__ = ["task_files", "write_task_dir", "container_def", "dockerfile", "task_environment", "FIXTURES_IN_SANDBOX"]
