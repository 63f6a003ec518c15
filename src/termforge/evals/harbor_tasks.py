"""Harbor / Terminal-Bench task directories: loading, and building them for the bwrap runtime.

A Harbor task is a directory with instruction.md, task.toml, environment/Dockerfile, tests/test.sh
(which writes the reward to /logs/verifier/reward.txt) and optionally solution/solve.sh.

The bwrap runtime runs tasks over the host's read-only /usr with a private writable /app, so only
a host-compatible subset of Dockerfiles can be "built" here, by interpreting them:

- FROM: ignored, after checking that the base is Debian-like (the host is Debian); one stage only.
- RUN apt-get install ...: the packages must already be installed on the host (dpkg-query);
  apt-get update/clean and `rm -rf /var/lib/apt/lists/*` are dropped.
- COPY/ADD of files from environment/: copied into the task layer under /app (or into a build
  scratch /tmp that must be empty again when the build ends); local tar archives given to ADD
  are extracted, as Docker does.
- WORKDIR: must be /app or below; it becomes the agent's working directory.
- ENV/ARG: applied to later RUN steps (ENV is also recorded for the sessions).
- other RUN commands: run inside a bwrap sandbox (Docker's /bin/sh -c, cwd = WORKDIR) with only
  /app writable; a write outside /app fails the build with the reason.
- CMD, ENTRYPOINT, EXPOSE, LABEL, USER, VOLUME, ...: no effect on the task's files; ignored.

Anything else (multi-stage builds, pip/curl/git downloads, package removal, heredocs, copies outside
/app, a test.sh that installs its own toolchain at verification time) is an *environment error*:
the build fails with a reason naming the line, and evaluation counts it apart from rewards 0 and 1.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import shlex
import shutil
import tarfile
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from termforge.errors import TermforgeError
from termforge.io import atomic_write_json, publish_dir, read_json, stable_hash, staging_dir
from termforge.runtime.base import Bind, BuildResult, Image, Limits
from termforge.runtime.bwrap import (BwrapSession, missing_debian_packages, run_sandboxed, sandbox_argv,
                                     tree_digest)

# Bumped whenever the interpretation of a Dockerfile changes, so cached layers are rebuilt.
BUILDER_VERSION = "harbor-bwrap-1"
TASK_ROOT = "/app"

# Harbor's defaults for fields a task.toml leaves out.
DEFAULT_VERIFIER_TIMEOUT_SEC = 600.0
DEFAULT_AGENT_TIMEOUT_SEC = 600.0
DEFAULT_BUILD_TIMEOUT_SEC = 600.0
DEFAULT_CPUS = 1
DEFAULT_MEMORY_MB = 2048
DEFAULT_STORAGE_MB = 10240
DEFAULT_ALLOW_INTERNET = True

# What ${PATH} expands to in an ENV line: the Debian/Ubuntu base images' default.
DOCKER_DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DEBIAN_LIKE_IMAGES = {"debian", "ubuntu", "buildpack-deps", "python"}
DEBIAN_CODENAMES = ("bookworm", "bullseye", "buster", "trixie", "jammy", "focal", "noble")
IGNORED_INSTRUCTIONS = {"CMD", "ENTRYPOINT", "EXPOSE", "LABEL", "MAINTAINER", "STOPSIGNAL", "HEALTHCHECK",
                        "VOLUME", "USER", "ONBUILD"}
ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz")
# Commands that fetch software at build time: they need network (and usually root), which a
# bwrap build over the host's /usr cannot give.
DOWNLOADERS = {"curl", "wget", "uv", "uvx", "add-apt-repository", "apt-key", "snap"}
# Package managers that fetch only with some subcommands (`go build` and `npm test` are fine).
FETCHING_SUBCOMMANDS = {"npm": {"install", "i", "ci", "add"}, "yarn": {"install", "add"},
                        "pnpm": {"install", "i", "add"}, "gem": {"install"}, "cargo": {"install"},
                        "go": {"install", "get"}, "conda": {"install", "create"}, "mamba": {"install", "create"},
                        "dpkg": {"-i", "--install"}}
APT_DROPPED = {"update", "clean", "autoclean", "autoremove", "upgrade", "dist-upgrade", "full-upgrade"}
# What a test.sh that provisions its verifier at run time looks like (Terminal-Bench 2.0 installs
# curl with apt-get, then uv, then runs pytest through uvx).
TEST_SH_INSTALLERS = re.compile(
    r"\b(apt-get|apt)\s+(-\S+\s+)*(install|update)\b|\bcurl\b|\bwget\b|\buvx?\s|\bpip3?\s+install\b")


class HarborTaskError(TermforgeError):
    """A Harbor task directory is malformed; the message names the directory and the field."""


class EnvironmentUnsupported(TermforgeError):
    """A task's environment cannot be built for the bwrap runtime (an environment error)."""


@dataclass
class HarborTask:
    """One Harbor task directory, with task.toml parsed and Harbor's defaults filled in."""

    name: str
    path: Path
    instruction: str
    config: dict
    version: str | None = None
    metadata: dict = field(default_factory=dict)
    verifier_timeout_sec: float = DEFAULT_VERIFIER_TIMEOUT_SEC
    agent_timeout_sec: float = DEFAULT_AGENT_TIMEOUT_SEC
    build_timeout_sec: float = DEFAULT_BUILD_TIMEOUT_SEC
    cpus: int = DEFAULT_CPUS
    memory_mb: int = DEFAULT_MEMORY_MB
    storage_mb: int = DEFAULT_STORAGE_MB
    allow_internet: bool = DEFAULT_ALLOW_INTERNET
    docker_image: str | None = None
    dockerfile: Path | None = None
    tests_dir: Path = Path()
    test_sh: Path = Path()
    solve_sh: Path | None = None

    @property
    def environment_dir(self) -> Path:
        return self.path / "environment"

    @property
    def difficulty(self) -> str | None:
        return self.metadata.get("difficulty")

    @property
    def category(self) -> str | None:
        return self.metadata.get("category")

    @property
    def tags(self) -> list[str]:
        return list(self.metadata.get("tags", []))


# -- loading ------------------------------------------------------------------------------------

def _bad(task_dir: Path, what: str) -> HarborTaskError:
    return HarborTaskError(f"Harbor task {task_dir}: {what}")


def _number(task_dir: Path, table: dict, section: str, key: str, default: float, integer: bool = False):
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise _bad(task_dir, f"task.toml [{section}] {key} must be a positive number, got {value!r}")
    if integer:
        if int(value) != value:
            raise _bad(task_dir, f"task.toml [{section}] {key} must be a whole number, got {value!r}")
        return int(value)
    return float(value)


def _size_mb(task_dir: Path, env: dict, key_mb: str, legacy_key: str, default: int) -> int:
    """memory_mb / storage_mb, or Terminal-Bench 2.0's legacy strings (memory = "2G")."""
    if key_mb in env:
        return _number(task_dir, env, "environment", key_mb, default, integer=True)
    if legacy_key not in env:
        return default
    text = env[legacy_key]
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*", str(text), re.IGNORECASE)
    if not isinstance(text, str) or not m:
        raise _bad(task_dir, f"task.toml [environment] {legacy_key} must look like \"2G\" or \"512M\", got {text!r}")
    scale = {"": 1 / (1024 * 1024), "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}[m.group(2).upper()]
    return max(1, int(float(m.group(1)) * scale))


def _table(task_dir: Path, config: dict, name: str) -> dict:
    value = config.get(name, {})
    if not isinstance(value, dict):
        raise _bad(task_dir, f"task.toml [{name}] must be a table, got {type(value).__name__}")
    return value


def load_harbor_task(task_dir: str | Path) -> HarborTask:
    """Read one Harbor task directory; clear errors for missing files and bad task.toml fields."""
    task_dir = Path(task_dir)
    if not task_dir.is_dir():
        raise HarborTaskError(f"Harbor task {task_dir}: not a directory")
    for required in ("instruction.md", "task.toml", "tests/test.sh"):
        if not (task_dir / required).is_file():
            raise _bad(task_dir, f"missing {required}")
    instruction = (task_dir / "instruction.md").read_text(encoding="utf-8")
    if not instruction.strip():
        raise _bad(task_dir, "instruction.md is empty")
    try:
        config = tomllib.loads((task_dir / "task.toml").read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise _bad(task_dir, f"task.toml is not valid TOML: {exc}") from None
    metadata = _table(task_dir, config, "metadata")
    verifier = _table(task_dir, config, "verifier")
    agent = _table(task_dir, config, "agent")
    env = _table(task_dir, config, "environment")
    tags = metadata.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise _bad(task_dir, f"task.toml [metadata] tags must be a list of strings, got {tags!r}")
    allow_internet = env.get("allow_internet", DEFAULT_ALLOW_INTERNET)
    if not isinstance(allow_internet, bool):
        raise _bad(task_dir, f"task.toml [environment] allow_internet must be true or false, got {allow_internet!r}")
    docker_image = env.get("docker_image")
    if docker_image is not None and not isinstance(docker_image, str):
        raise _bad(task_dir, f"task.toml [environment] docker_image must be a string, got {docker_image!r}")
    dockerfile = task_dir / "environment" / "Dockerfile"
    if not dockerfile.is_file():
        if not docker_image:
            raise _bad(task_dir, "missing environment/Dockerfile (and task.toml [environment] names no docker_image)")
        dockerfile = None
    solve_sh = task_dir / "solution" / "solve.sh"
    version = config.get("version", config.get("schema_version"))
    return HarborTask(
        name=task_dir.name,
        path=task_dir,
        instruction=instruction,
        config=config,
        version=str(version) if version is not None else None,
        metadata=metadata,
        verifier_timeout_sec=_number(task_dir, verifier, "verifier", "timeout_sec", DEFAULT_VERIFIER_TIMEOUT_SEC),
        agent_timeout_sec=_number(task_dir, agent, "agent", "timeout_sec", DEFAULT_AGENT_TIMEOUT_SEC),
        build_timeout_sec=_number(task_dir, env, "environment", "build_timeout_sec", DEFAULT_BUILD_TIMEOUT_SEC),
        cpus=_number(task_dir, env, "environment", "cpus", DEFAULT_CPUS, integer=True),
        memory_mb=_size_mb(task_dir, env, "memory_mb", "memory", DEFAULT_MEMORY_MB),
        storage_mb=_size_mb(task_dir, env, "storage_mb", "storage", DEFAULT_STORAGE_MB),
        allow_internet=allow_internet,
        docker_image=docker_image,
        dockerfile=dockerfile,
        tests_dir=task_dir / "tests",
        test_sh=task_dir / "tests" / "test.sh",
        solve_sh=solve_sh if solve_sh.is_file() else None,
    )


def load_harbor_dir(root: str | Path) -> list[HarborTask]:
    """Every task under a Harbor dataset directory (sorted by name); root may itself be one task.

    A subdirectory counts as a task when it holds task.toml or instruction.md, so a half-written
    task is reported with what it lacks instead of being skipped silently."""
    root = Path(root)
    if not root.is_dir():
        raise HarborTaskError(f"Harbor dataset {root}: not a directory")
    if (root / "task.toml").exists():
        return [load_harbor_task(root)]
    dirs = [d for d in sorted(root.iterdir()) if d.is_dir() and not d.name.startswith(".")
            and ((d / "task.toml").exists() or (d / "instruction.md").exists())]
    if not dirs:
        raise HarborTaskError(f"Harbor dataset {root}: no task directories (with task.toml) found")
    return [load_harbor_task(d) for d in dirs]


# -- Dockerfile interpretation ------------------------------------------------------------------

@dataclass
class DockerInstruction:
    lineno: int
    keyword: str
    args: str


def parse_dockerfile(text: str) -> list[DockerInstruction]:
    """Split a Dockerfile into instructions: comments dropped, backslash continuations joined."""
    out: list[DockerInstruction] = []
    pending: list[str] = []
    start = 0
    for lineno, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if stripped.startswith("#") or not stripped:
            continue
        if not pending:
            start = lineno
        if stripped.endswith("\\"):
            pending.append(stripped[:-1])
            continue
        pending.append(stripped)
        line = " ".join(p.strip() for p in pending if p.strip())
        pending = []
        keyword, _, args = line.partition(" ")
        out.append(DockerInstruction(start, keyword.upper(), args.strip()))
    if pending:
        line = " ".join(p.strip() for p in pending if p.strip())
        keyword, _, args = line.partition(" ")
        out.append(DockerInstruction(start, keyword.upper(), args.strip()))
    return out


@dataclass
class CopyStep:
    lineno: int
    sources: list[Path]
    dest: str
    dest_is_dir: bool
    chmod: int | None
    extract: bool


@dataclass
class RunStep:
    lineno: int
    argv: list[str]
    env: dict
    cwd: str
    text: str


@dataclass
class BuildPlan:
    """What a Dockerfile asks for, in bwrap terms."""

    base_image: str
    apt_packages: list[str]
    steps: list
    workdir: str
    env: dict


_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))")


def _substitute(text: str, values: dict) -> str:
    def repl(m: re.Match) -> str:
        name = m.group(1) or m.group(3)
        if name in values:
            return values[name]
        return m.group(2) or ""

    return _VAR.sub(repl, text)


def _debian_like(image: str) -> bool:
    ref = image.split("@")[0]
    name, _, tag = ref.rpartition(":") if ":" in ref.rsplit("/", 1)[-1] else (ref, "", "")
    base = name.rsplit("/", 1)[-1].lower()
    tag = tag.lower()
    if "alpine" in tag or "windows" in tag:
        return False
    # Prefix match: Terminal-Bench's own bases are named like python-3-13 or ubuntu-24-04.
    return any(base == n or base.startswith(n + "-") for n in DEBIAN_LIKE_IMAGES) or any(
        c in tag for c in DEBIAN_CODENAMES)


def _split_shell(command: str) -> list[tuple[str, str]]:
    """Split a shell command at top-level &&, ||, ; and newlines: [(separator_before, segment)].
    Quotes, escapes and $( ) are respected, so separators inside them stay put."""
    parts: list[tuple[str, str]] = []
    sep, buf = "", []
    i, quote, depth = 0, "", 0
    while i < len(command):
        ch = command[i]
        if quote:
            buf.append(ch)
            if ch == "\\" and quote == '"' and i + 1 < len(command):
                buf.append(command[i + 1])
                i += 1
            elif ch == quote:
                quote = ""
        elif ch == "\\" and i + 1 < len(command):
            buf.append(command[i:i + 2])
            i += 1
        elif ch in "'\"`":
            quote = ch
            buf.append(ch)
        elif command.startswith("$(", i):
            depth += 1
            buf.append("$(")
            i += 1
        elif ch == ")" and depth:
            depth -= 1
            buf.append(ch)
        elif depth == 0 and (command.startswith("&&", i) or command.startswith("||", i)):
            parts.append((sep, "".join(buf)))
            sep, buf = command[i:i + 2], []
            i += 1
        elif depth == 0 and ch in ";\n":
            parts.append((sep, "".join(buf)))
            sep, buf = ";", []
        else:
            buf.append(ch)
        i += 1
    parts.append((sep, "".join(buf)))
    return [(s, seg) for s, seg in parts if seg.strip() or s]


def _command_words(segment: str) -> list[str]:
    try:
        words = shlex.split(segment, comments=True)
    except ValueError:
        return []
    while words and (re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]) or words[0] in ("sudo", "env", "exec")):
        words = words[1:]
    return words


def _apt_packages(words: list[str], where: str) -> list[str] | None:
    """Packages an `apt-get ...` segment installs ([] for update/clean); None if not apt."""
    if not words or words[0] not in ("apt-get", "apt", "aptitude"):
        return None
    rest = words[1:]
    sub, args, i = None, [], 0
    while i < len(rest):
        word = rest[i]
        if word in ("-o", "-t", "-c", "--target-release", "--option", "--config-file"):
            i += 2
            continue
        if word.startswith("-"):
            i += 1
            continue
        if sub is None:
            sub = word
        else:
            args.append(word)
        i += 1
    if sub in APT_DROPPED:
        return []
    if sub == "install":
        pkgs = []
        for a in args:
            if a.startswith(("/", "./")) or a.endswith(".deb"):
                raise EnvironmentUnsupported(f"{where}: installing the local package file {a} needs root")
            pkgs.append(re.split(r"[=/]", a, maxsplit=1)[0])
        return pkgs
    raise EnvironmentUnsupported(f"{where}: `{words[0]} {sub}` cannot be emulated over the host's packages")


def _is_apt_housekeeping(words: list[str]) -> bool:
    """`rm -rf /var/lib/apt/lists/*` and the like: they only tidy apt's own caches."""
    if not words or words[0] != "rm":
        return False
    targets = [w for w in words[1:] if not w.startswith("-")]
    return bool(targets) and all(t.startswith(("/var/lib/apt", "/var/cache/apt", "/var/cache/debconf",
                                               "/var/log/apt", "/var/log/dpkg")) for t in targets)


def _check_downloader(words: list[str], where: str) -> None:
    if not words:
        return
    prog = posixpath.basename(words[0])
    if prog in ("pip", "pip3") or (prog.startswith("python") and words[1:3] == ["-m", "pip"]):
        if "install" in words:
            raise EnvironmentUnsupported(
                f"{where}: pip install needs network and writes outside /app; the bwrap runtime offers "
                "only the host's Debian packages (e.g. python3-numpy instead)")
    elif prog == "git" and "clone" in words:
        raise EnvironmentUnsupported(f"{where}: git clone needs network at build time")
    elif prog in DOWNLOADERS or FETCHING_SUBCOMMANDS.get(prog, set()) & set(words[1:]):
        raise EnvironmentUnsupported(f"{where}: `{' '.join(words[:2])}` fetches or installs software at build "
                                     "time, which needs network and root (not available to a bwrap build)")


def _plan_run(args: str, lineno: int, shell: list[str], env: dict, cwd: str,
              apt: list[str]) -> RunStep | None:
    where = f"Dockerfile line {lineno} (RUN)"
    while (m := re.match(r"--(\w+)=(\S+)\s*", args)):
        # BuildKit flags: a cache mount or a network mode changes nothing in the result here.
        if not (m.group(1) == "network" or (m.group(1) == "mount" and "type=cache" in m.group(2))):
            raise EnvironmentUnsupported(f"{where}: --{m.group(1)}={m.group(2)} is not supported by the bwrap builder")
        args = args[m.end():]
    if args.startswith("["):
        try:
            argv = json.loads(args)
        except json.JSONDecodeError:
            argv = None
        if isinstance(argv, list) and all(isinstance(a, str) for a in argv):
            words = _command_words(shlex.join(argv))
            pkgs = _apt_packages(words, where)
            if pkgs is not None:
                apt.extend(pkgs)
                return None
            _check_downloader(words, where)
            return RunStep(lineno, argv, dict(env), cwd, shlex.join(argv))
    if re.search(r"(?<!<)<<-?\s*['\"]?[A-Za-z_]", args):
        # A here-document in a one-line RUN is a Dockerfile heredoc whose body follows the line.
        raise EnvironmentUnsupported(f"{where}: Dockerfile heredocs are not supported by the bwrap builder")
    kept: list[str] = []
    any_real = False
    for sep, segment in _split_shell(args):
        words = _command_words(_substitute(segment, env))
        pkgs = _apt_packages(words, where)
        # A dropped command becomes `true`, so the separators around it keep their meaning.
        blank = segment[:len(segment) - len(segment.lstrip())] + "true" + segment[len(segment.rstrip()):]
        if pkgs is not None:
            apt.extend(pkgs)
            segment = blank
        elif _is_apt_housekeeping(words):
            segment = blank
        else:
            _check_downloader(words, where)
            any_real = any_real or bool(segment.strip())
        kept.append(f"{sep}{segment}")
    if not any_real:
        return None
    command = "".join(kept).strip()
    return RunStep(lineno, [*shell, command], dict(env), cwd, command)


def _resolve_dest(dest: str, workdir: str, where: str) -> str:
    path = dest if dest.startswith("/") else posixpath.join(workdir or "/", dest)
    path = posixpath.normpath(path)
    if path == "/tmp" or path.startswith("/tmp/"):
        return path
    if path != TASK_ROOT and not path.startswith(TASK_ROOT + "/"):
        raise EnvironmentUnsupported(
            f"{where}: destination {path} is outside {TASK_ROOT}; the bwrap runtime keeps only the task "
            f"layer at {TASK_ROOT} (the host's /usr and /etc are read-only)")
    return path


def _plan_copy(inst: DockerInstruction, values: dict, workdir: str, context: Path) -> CopyStep:
    where = f"Dockerfile line {inst.lineno} ({inst.keyword})"
    args = inst.args
    chmod = None
    words: list[str]
    if args.lstrip().startswith("["):
        try:
            words = json.loads(args)
        except json.JSONDecodeError as exc:
            raise EnvironmentUnsupported(f"{where}: bad JSON array: {exc}") from None
    else:
        try:
            words = shlex.split(args)
        except ValueError as exc:
            raise EnvironmentUnsupported(f"{where}: cannot parse arguments: {exc}") from None
    flags = []
    while words and words[0].startswith("--"):
        flags.append(words.pop(0))
    for flag in flags:
        name, _, value = flag[2:].partition("=")
        if name == "chmod":
            if not re.fullmatch(r"[0-7]{3,4}", value):
                raise EnvironmentUnsupported(f"{where}: only octal --chmod is supported, got {value!r}")
            chmod = int(value, 8)
        elif name not in ("chown", "link"):
            raise EnvironmentUnsupported(f"{where}: --{name} is not supported by the bwrap builder")
    words = [_substitute(w, values) for w in words]
    if len(words) < 2:
        raise EnvironmentUnsupported(f"{where}: needs at least one source and a destination")
    *sources, dest = words
    resolved: list[Path] = []
    root = context.resolve()
    for src in sources:
        if re.match(r"^[a-z]+://", src):
            raise EnvironmentUnsupported(f"{where}: remote source {src} needs network")
        rel = src.lstrip("/")
        if any(ch in rel for ch in "*?["):
            matches = sorted(p for p in root.glob(rel))
        else:
            matches = [root / rel]
        for m in matches:
            real = m.resolve()
            if real != root and root not in real.parents:
                raise EnvironmentUnsupported(f"{where}: source {src} is outside the build context environment/")
            if not m.exists():
                raise EnvironmentUnsupported(f"{where}: source {src} not found in environment/")
            resolved.append(m)
        if not matches:
            raise EnvironmentUnsupported(f"{where}: source {src} matches nothing in environment/")
    dest_path = _resolve_dest(dest, workdir, where)
    dest_is_dir = dest.endswith("/") or len(resolved) > 1
    extract = inst.keyword == "ADD"
    return CopyStep(inst.lineno, resolved, dest_path, dest_is_dir, chmod, extract)


def plan_dockerfile(dockerfile: Path, context: Path) -> BuildPlan:
    """Interpret a Dockerfile for the bwrap runtime; EnvironmentUnsupported names what cannot be."""
    instructions = parse_dockerfile(Path(dockerfile).read_text(encoding="utf-8"))
    base = None
    apt: list[str] = []
    steps: list = []
    env: dict[str, str] = {}
    args: dict[str, str] = {}
    workdir = ""
    shell = ["/bin/sh", "-c"]
    for inst in instructions:
        where = f"Dockerfile line {inst.lineno} ({inst.keyword})"
        values = {"PATH": DOCKER_DEFAULT_PATH, **args, **env}
        if inst.keyword == "FROM":
            if base is not None:
                raise EnvironmentUnsupported(f"{where}: multi-stage builds are not supported by the bwrap builder")
            words = [w for w in inst.args.split() if not w.startswith("--")]
            if not words:
                raise EnvironmentUnsupported(f"{where}: FROM names no image")
            base = _substitute(words[0], values)
            if not _debian_like(base):
                raise EnvironmentUnsupported(
                    f"{where}: base image {base} is not Debian-like; the bwrap runtime runs on the host's "
                    "Debian /usr")
        elif base is None and inst.keyword != "ARG":
            raise EnvironmentUnsupported(f"{where}: instruction before FROM")
        elif inst.keyword == "RUN":
            step = _plan_run(inst.args, inst.lineno, shell, {**args, **env}, workdir or "/", apt)
            if step is not None:
                steps.append(step)
        elif inst.keyword in ("COPY", "ADD"):
            steps.append(_plan_copy(inst, values, workdir, context))
        elif inst.keyword == "WORKDIR":
            target = _substitute(inst.args.strip().strip('"'), values)
            path = posixpath.normpath(target if target.startswith("/") else posixpath.join(workdir or "/", target))
            if path != TASK_ROOT and not path.startswith(TASK_ROOT + "/"):
                raise EnvironmentUnsupported(
                    f"{where}: WORKDIR {path} is outside {TASK_ROOT}, the only writable place under bwrap")
            workdir = path
            steps.append(CopyStep(inst.lineno, [], path, True, None, False))
        elif inst.keyword in ("ENV", "ARG"):
            try:
                words = shlex.split(inst.args)
            except ValueError as exc:
                raise EnvironmentUnsupported(f"{where}: cannot parse: {exc}") from None
            pairs: list[tuple[str, str | None]] = []
            if inst.keyword == "ENV" and words and "=" not in words[0]:
                pairs.append((words[0], " ".join(words[1:])))  # legacy `ENV KEY value with spaces`
            else:
                for w in words:
                    key, eq, value = w.partition("=")
                    pairs.append((key, value if eq else None))
            for key, value in pairs:
                if inst.keyword == "ENV":
                    env[key] = _substitute(value or "", values)
                elif value is not None:
                    args.setdefault(key, _substitute(value, values))
        elif inst.keyword == "SHELL":
            try:
                shell_argv = json.loads(inst.args)
            except json.JSONDecodeError:
                shell_argv = None
            if not (isinstance(shell_argv, list) and shell_argv and all(isinstance(a, str) for a in shell_argv)
                    and os.path.exists(shell_argv[0])):
                raise EnvironmentUnsupported(f"{where}: SHELL must be a JSON array naming a shell the host has")
            shell = shell_argv
        elif inst.keyword in IGNORED_INSTRUCTIONS:
            continue
        else:
            raise EnvironmentUnsupported(f"{where}: unsupported instruction {inst.keyword}")
    if base is None:
        raise EnvironmentUnsupported("Dockerfile has no FROM")
    return BuildPlan(base, sorted(set(apt)), steps, workdir or TASK_ROOT, env)


def check_test_sh_offline(task: HarborTask) -> None:
    """Terminal-Bench 2.0's test.sh installs curl and uv and fetches pytest when it runs; under bwrap
    (no root, usually no network) it could only ever write reward 0, so say so up front."""
    text = task.test_sh.read_text(encoding="utf-8", errors="replace")
    for lineno, line in enumerate(text.splitlines(), 1):
        code = line.split("#", 1)[0]
        if TEST_SH_INSTALLERS.search(code):
            raise EnvironmentUnsupported(
                f"tests/test.sh line {lineno} installs its verifier toolchain at run time ({code.strip()}); "
                "that needs root and network, which the bwrap runtime does not give")


# -- building -----------------------------------------------------------------------------------

def _host(layer: Path, tmp: Path, sandbox_path: str) -> Path:
    for prefix, host in ((TASK_ROOT, layer), ("/tmp", tmp)):
        if sandbox_path == prefix or sandbox_path.startswith(prefix + "/"):
            return host / sandbox_path[len(prefix):].lstrip("/")
    raise EnvironmentUnsupported(f"{sandbox_path} is outside {TASK_ROOT}")  # _resolve_dest prevents this


def _is_archive(path: Path) -> bool:
    return path.is_file() and path.name.endswith(ARCHIVE_SUFFIXES) and tarfile.is_tarfile(path)


def _extract(archive: Path, dest: Path) -> None:
    """Unpack a tar archive as ADD does, refusing members that would land outside dest or that
    are links or devices (Python's "data" filter is not in every 3.11 patch release)."""
    dest.mkdir(parents=True, exist_ok=True)
    root = dest.resolve()
    with tarfile.open(archive) as tar:
        members = tar.getmembers()
        for m in members:
            target = (root / m.name).resolve()
            if target != root and root not in target.parents:
                raise EnvironmentUnsupported(f"ADD {archive.name}: member {m.name} would land outside {dest.name}")
            if not (m.isfile() or m.isdir()):
                raise EnvironmentUnsupported(f"ADD {archive.name}: member {m.name} is a link or device")
        for m in members:
            m.mode = (m.mode | 0o600) & 0o7777
            # Owned by whoever builds, like every other file of the layer (the sandbox user).
            m.uid, m.gid, m.uname, m.gname = os.getuid(), os.getgid(), "", ""
            tar.extract(m, root, set_attrs=True, **({"filter": "fully_trusted"}
                                                    if hasattr(tarfile, "fully_trusted_filter") else {}))


def _apply_copy(step: CopyStep, layer: Path, tmp: Path) -> None:
    dest = _host(layer, tmp, step.dest)
    if not step.sources:  # WORKDIR
        dest.mkdir(parents=True, exist_ok=True)
        return
    for src in step.sources:
        if step.extract and _is_archive(src):
            _extract(src, dest)
            continue
        if src.is_dir():
            shutil.copytree(src, dest, symlinks=True, dirs_exist_ok=True)
            if step.chmod is not None:
                for p in [dest, *dest.rglob("*")]:
                    if not p.is_symlink():
                        p.chmod(step.chmod)
            continue
        target = dest / src.name if (step.dest_is_dir or dest.is_dir()) else dest
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target)
        if step.chmod is not None:
            target.chmod(step.chmod)


def _first_line_with(text: str, needles: tuple[str, ...]) -> str | None:
    for line in text.splitlines():
        if any(n in line for n in needles):
            return line.strip()
    return None


def harbor_image_digest(task: HarborTask) -> str:
    return stable_hash([BUILDER_VERSION, tree_digest(task.environment_dir), task.allow_internet], 24)


def build_harbor_image(task: HarborTask, images_dir: str | Path, limits: Limits | None = None,
                       timeout: float | None = None) -> BuildResult:
    """Build a Harbor task's environment as a bwrap image (images_dir/<name>/layer + image.json,
    the layout BwrapRuntime.start expects). A failure is an environment error: BuildResult.ok is
    False and reason says why. Content-addressed: an unchanged environment/ is not rebuilt."""
    start = time.monotonic()
    final = Path(images_dir) / task.name
    digest = harbor_image_digest(task)
    meta_path = final / "image.json"
    if meta_path.exists():
        meta = read_json(meta_path)
        if meta.get("digest") == digest and meta.get("backend") == "bwrap":
            log = (final / "build.log").read_text() if (final / "build.log").exists() else ""
            return BuildResult(True, _image(task, final, meta), "cached", log, 0.0, cached=True)

    def fail(reason: str, log: str = "") -> BuildResult:
        reason = f"task {task.name}: {reason}"
        return BuildResult(False, None, reason, (log + "\n" + reason).strip(), time.monotonic() - start)

    if task.dockerfile is None:
        return fail(f"the prebuilt image {task.docker_image} cannot run under bwrap (no environment/Dockerfile)")
    try:
        check_test_sh_offline(task)
        plan = plan_dockerfile(task.dockerfile, task.environment_dir)
    except EnvironmentUnsupported as exc:
        return fail(str(exc))
    missing = missing_debian_packages(plan.apt_packages)
    if missing:
        return fail(f"the bwrap runtime runs on the host's /usr, which lacks Debian packages {missing} "
                    "(apt-get install them on the host, or use the apptainer or harbor runner)")
    timeout = float(timeout or task.build_timeout_sec)
    limits = limits or Limits(wall_sec=timeout, cpu_sec=int(timeout), memory_mb=max(task.memory_mb, 2048))
    stage = staging_dir(final)
    layer, tmp, home, logs = stage / "layer", stage / "tmp", stage / "home", stage / "logs"
    for d in (layer, tmp, home, logs):
        d.mkdir()
    log_lines = [f"# {BUILDER_VERSION}: base {plan.base_image}; host packages {plan.apt_packages}"]
    try:
        for step in plan.steps:
            if isinstance(step, CopyStep):
                _apply_copy(step, layer, tmp)
                continue
            remaining = timeout - (time.monotonic() - start)
            if remaining <= 0:
                return fail(f"build timed out after {timeout:.0f}s", "\n".join(log_lines))
            # /logs exists at run time (Harbor mounts it); writes there while building are dropped.
            argv = sandbox_argv(layer, step.argv, binds=[Bind(logs, "/logs", writable=True)], env=step.env,
                                cwd=step.cwd, allow_network=False, tmp_dir=tmp, home_dir=home)
            res = run_sandboxed(argv, remaining, limits)
            log_lines.append(f"$ RUN {step.text}  (line {step.lineno}, exit {res.exit_code}, "
                             f"{res.duration_sec:.2f}s)\n{res.stdout}{res.stderr}")
            where = f"Dockerfile line {step.lineno} (RUN)"
            outside = _first_line_with(res.stderr, ("Read-only file system", "Permission denied",
                                                    "Operation not permitted"))
            if res.timed_out:
                return fail(f"{where} timed out after {remaining:.0f}s", "\n".join(log_lines))
            if outside:
                return fail(f"{where} tried to write outside {TASK_ROOT}: {outside}", "\n".join(log_lines))
            if res.exit_code != 0:
                return fail(f"{where} failed with exit code {res.exit_code}: {res.tail(300)}", "\n".join(log_lines))
        leftovers = [f"/tmp/{p.name}" for p in tmp.iterdir()] + [f"/home/user/{p.name}" for p in home.iterdir()]
        if leftovers:
            return fail(f"the build left files outside {TASK_ROOT} ({', '.join(sorted(leftovers))}), "
                        "which bwrap sessions would not see", "\n".join(log_lines))
        for d in (tmp, home, logs):
            shutil.rmtree(d)
        meta = {"task_id": task.name, "backend": "bwrap", "digest": digest, "allow_network": task.allow_internet,
                "kind": "harbor", "builder": BUILDER_VERSION, "base_image": plan.base_image,
                "apt_packages": plan.apt_packages, "workdir": plan.workdir, "env": plan.env}
        (stage / "build.log").write_text("\n".join(log_lines) + "\n")
        atomic_write_json(stage / "image.json", meta)
        publish_dir(stage, final)
        stage = None
        return BuildResult(True, _image(task, final, meta), "built", "\n".join(log_lines), time.monotonic() - start)
    except EnvironmentUnsupported as exc:
        return fail(str(exc), "\n".join(log_lines))
    except OSError as exc:
        return fail(f"copying the environment's files failed: {exc}", "\n".join(log_lines))
    finally:
        if stage is not None:
            shutil.rmtree(stage, ignore_errors=True)


def _image(task: HarborTask, path: Path, meta: dict) -> Image:
    return Image(task.name, "bwrap", path, meta["digest"], bool(meta.get("allow_network", False)),
                 meta={k: meta[k] for k in ("workdir", "env", "base_image", "apt_packages") if k in meta})


class HarborSession(BwrapSession):
    """A bwrap session over a Harbor task's layer: commands start in the Dockerfile's WORKDIR with
    its ENV (as `docker exec` into the built container would)."""

    def __init__(self, image: Image, limits: Limits, work_root: Path | None = None):
        super().__init__(image, limits, work_root)
        # (BwrapSession.workdir is the host directory holding this session's copy of the layer.)
        self.task_workdir = image.meta.get("workdir", TASK_ROOT)
        self.image_env = dict(image.meta.get("env", {}))

    def exec(self, command: str, timeout: float | None = None, env: dict | None = None, cwd: str | None = None,
             **kwargs):
        return super().exec(command, timeout=timeout, env={**self.image_env, **(env or {})},
                            cwd=cwd or self.task_workdir, **kwargs)

    def open_shell(self, env: dict | None = None):
        """The agent's persistent shell, with the image's ENV (it starts in /app)."""
        return super().open_shell(env={**self.image_env, **(env or {})})


def start_harbor_session(image: Image, limits: Limits | None = None, work_root: Path | None = None) -> HarborSession:
    return HarborSession(image, limits or Limits(), work_root)


__all__ = [
    "HarborTask", "HarborTaskError", "EnvironmentUnsupported", "HarborSession", "BuildPlan",
    "load_harbor_task", "load_harbor_dir", "parse_dockerfile", "plan_dockerfile", "check_test_sh_offline",
    "build_harbor_image", "start_harbor_session", "harbor_image_digest",
]
