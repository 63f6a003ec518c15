"""Harbor / Terminal-Bench task directories: loading, and building them for the bwrap runtime.

A Harbor task is a directory with instruction.md, task.toml, environment/Dockerfile, tests/test.sh
(which writes /logs/verifier/reward.json or reward.txt) and optionally solution/solve.sh; a
multi-step task has steps/<name>/ with each step's instruction (and tests, solution, workdir).
task.toml is read as Harbor 0.26 reads it (harbor/models/task/config.py; docs/terminal-bench.md).

The bwrap runtime runs tasks on the task's own environment/Dockerfile built by buildah (termforge.
images.dockerfile; docs/images.md "Dockerfile builds"): the built root filesystem is /, writable as
a container's (each session's writes in an overlay in its own tree under its disk cap: termforge.
runtime.rootlayer), its /app the task layer, and the image's own configuration (Env, WorkingDir,
User, Entrypoint) is what every command of the session runs with (HarborSession). Before building,
the Dockerfile is read (plan_dockerfile) for what the build needs, and buildah then builds it as
written (buildah_dockerfile; docs/terminal-bench.md "Dockerfiles as written"):

- FROM (every stage's) and COPY --from=<image>: resolved to an image termforge has (a declared
  base under one of its image names, e.g. debian:bookworm-slim, or an image of the store), pulled
  from its registry first when NativeOptions.pull_images allows; any other image is an environment
  error naming it and the commands that add it. Each goes into the build's storage under
  localhost/termforge-base:<key>, which the FROM lines then name.
- RUN apt-get install ...: the packages make a derived base of the stage's image (built once and
  shared), which buildah builds on, so apt-get finds them (offline too); so do the packages a
  test.sh installs with apt-get when it runs (the sandbox has no capabilities for dpkg then).
- Heredocs become the shell steps BuildKit runs (buildah 1.28 does not read them).
- The build has network (a namespace of its own that slirp4netns connects to the outside, never
  the host's: runtime.process.PublicNetwork) and the host's CA bundle unless
  NativeOptions.build_network is off; then a RUN step that fetches software is refused up front with its line, as a test.sh that installs
  its toolchain in a task without network is (with network it runs, the hosts it fetches from
  probed first: verifier_hosts). Secret/ssh mounts and a final stage FROM scratch are refused.

Everything refused, and a Dockerfile buildah fails to build (its log tail in the reason), is an
*environment error*: evaluation counts it apart from rewards 0 and 1.
"""

from __future__ import annotations

import json
import math
import os
import posixpath
import re
import shlex
import tempfile
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from termforge.containment import contained, tree_problem
from termforge.errors import InputError, TermforgeError, show_path
from termforge.images.imageconfig import ImageConfig, resolve_user
from termforge.io import atomic_write_json, publish_dir, read_json, stable_hash, staging_dir
from termforge.runtime.base import BuildResult, Image, Limits
from termforge.runtime import trees
from termforge.runtime.bwrap import HOST_ROOTFS, BwrapSession, image_summary, layer_problem, tree_digest

# Bumped whenever the interpretation of a Dockerfile changes, so cached layers are rebuilt.
BUILDER_VERSION = "harbor-buildah-3"
TASK_ROOT = "/app"

# Harbor's defaults for fields a task.toml leaves out (harbor/models/task/config.py): the verifier
# and build timeouts are 600 s; the agent's timeout, cpus, memory and storage are unset (None), and
# the network is public. The native runner then uses its own limits (NATIVE_* below).
DEFAULT_VERIFIER_TIMEOUT_SEC = 600.0
DEFAULT_BUILD_TIMEOUT_SEC = 600.0
DEFAULT_NETWORK_MODE = "public"
NETWORK_MODES = ("no-network", "public", "allowlist")
NATIVE_AGENT_TIMEOUT_SEC = 600.0
# How long an image's Entrypoint may take to set the container up before its command runs.
ENTRYPOINT_TIMEOUT_SEC = 120.0
NATIVE_MEMORY_MB = 2048
# Kept for callers that read them as "what the runner uses when the task says nothing".
DEFAULT_AGENT_TIMEOUT_SEC = NATIVE_AGENT_TIMEOUT_SEC
DEFAULT_MEMORY_MB = NATIVE_MEMORY_MB
# Harbor's canary lines (harbor/models/task/task.py, strip_canary): leading `# ...canary...` or
# `<!-- ...canary... -->` lines, case-insensitive, then the blank lines after them.
CANARY_LINE = re.compile(r"^(<!--.*canary.*-->|#.*canary.*)$", re.IGNORECASE)
# Harbor's package name pattern for [task].name (harbor/constants.py ORG_NAME_PATTERN).
TASK_NAME_PATTERN = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9._-]*/[a-zA-Z0-9][a-zA-Z0-9._-]*$")

# What ${PATH} expands to in an ENV line: the Debian/Ubuntu base images' default.
DOCKER_DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
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


@dataclass(frozen=True)
class Healthcheck:
    """[environment].healthcheck or a step's (harbor/models/task/config.py HealthcheckConfig, with
    its defaults): `command` run until it exits 0, as Docker's HEALTHCHECK does."""

    command: str
    interval_sec: float = 5.0
    timeout_sec: float = 30.0
    start_period_sec: float = 0.0
    start_interval_sec: float = 5.0
    retries: int = 3


class HarborTaskError(TermforgeError):
    """A Harbor task directory is malformed; the message names the directory and the field."""


class EnvironmentUnsupported(TermforgeError):
    """A task's environment cannot be built for the bwrap runtime (an environment error)."""


@dataclass
class HarborStep:
    """One [[steps]] entry of a multi-step task, with its files resolved as Harbor resolves them
    (harbor/models/task/paths.py): steps/<name>/instruction.md; steps/<name>/tests/ when it holds
    test.sh, else the task's shared tests/; steps/<name>/solution/ when present, else solution/;
    steps/<name>/workdir/ is copied into the working directory before the step (its setup.sh run).
    The verifier's /tests is the shared tests/ with the step's own tests/ uploaded over it
    (harbor/verifier/verifier.py Verifier._resolve_tests: both, in that order, when they exist)."""

    name: str
    dir: Path
    instruction: str
    tests_root: Path  # the directory whose tests/test.sh the verifier runs
    solution_dir: Path
    agent_timeout: float | None = None
    # A step's [verifier] is a whole VerifierConfig (harbor/models/task/config.py StepConfig), so its
    # timeout_sec defaults to 600 s, never the task's [verifier] timeout (harbor/trial/trial.py
    # _step_verifier_timeout_sec takes the step's whenever it is not None).
    verifier_timeout_sec: float = DEFAULT_VERIFIER_TIMEOUT_SEC
    test_sources: list = field(default_factory=list)  # the tests/ folders uploaded to /tests, in order
    verifier_env: dict = field(default_factory=dict)
    min_reward: float | dict | None = None
    healthcheck: Healthcheck | None = None

    @property
    def workdir_dir(self) -> Path:
        return self.dir / "workdir"


@dataclass
class HarborTask:
    """One Harbor task directory, with task.toml parsed and Harbor's defaults filled in.

    `name` is what Harbor calls the task (harbor/models/task/task.py: [task].name when the section
    is there, else the directory's name), so native and Harbor results join on it; `slug` is the
    same name made safe for one path component (images, trial directories). `unsupported` lists
    what the native runner cannot honour (GPUs, a separate verifier environment, an allow-listed
    network...): such a task loads, but running it natively is an environment
    error that says why, never a score."""

    name: str
    path: Path
    instruction: str
    config: dict
    version: str | None = None
    metadata: dict = field(default_factory=dict)
    verifier_timeout_sec: float = DEFAULT_VERIFIER_TIMEOUT_SEC
    agent_timeout: float | None = None
    build_timeout_sec: float = DEFAULT_BUILD_TIMEOUT_SEC
    cpus: int | float | None = None
    memory_mb: int | None = None
    # [environment].workdir (harbor/models/task/config.py EnvironmentConfig.workdir): the working
    # directory of every command, over the image's WORKDIR.
    workdir: str | None = None
    storage_mb: int | None = None
    network_mode: str = DEFAULT_NETWORK_MODE
    docker_image: str | None = None
    dockerfile: Path | None = None
    tests_dir: Path = Path()
    test_sh: Path = Path()
    solve_sh: Path | None = None
    verifier_env: dict = field(default_factory=dict)
    solution_env: dict = field(default_factory=dict)
    environment_env: dict = field(default_factory=dict)
    steps: list[HarborStep] = field(default_factory=list)
    multi_step_reward_strategy: str | None = None
    unsupported: list[str] = field(default_factory=list)
    solution_dir: Path | None = None  # solution/, or a step's (the oracle's files)
    healthcheck: Healthcheck | None = None

    @property
    def test_scripts(self) -> list[Path]:
        """Every test.sh the verifier may run: the task's, and each step's own."""
        paths = [self.test_sh] + [st.tests_root / "tests" / "test.sh" for st in self.steps]
        return sorted({p for p in paths if p.is_file()})

    @property
    def slug(self) -> str:
        return self.name.replace("/", "__")

    @property
    def allow_internet(self) -> bool:
        return self.network_mode == "public"

    @property
    def agent_timeout_sec(self) -> float:
        """The agent's time limit as the native runner applies it (Harbor leaves it unset)."""
        return self.agent_timeout if self.agent_timeout is not None else NATIVE_AGENT_TIMEOUT_SEC

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


@dataclass
class BrokenTask:
    """A directory of a dataset that could not be loaded, with the reason."""

    name: str
    path: Path
    reason: str

    def to_dict(self) -> dict:
        return {"task_name": self.name, "path": str(self.path), "reason": self.reason}


# -- loading ------------------------------------------------------------------------------------

def _bad(task_dir: Path, what: str) -> HarborTaskError:
    return HarborTaskError(f"Harbor task {task_dir}: {what}")


def strip_canary(text: str) -> str:
    """Harbor's instruction as the agent sees it: leading canary lines and the blank lines after
    them removed (harbor/models/task/task.py)."""
    lines = text.split("\n")
    i = 0
    while i < len(lines) and CANARY_LINE.match(lines[i].strip()):
        i += 1
    while i < len(lines) and not lines[i].strip():
        i += 1
    return "\n".join(lines[i:])


def _healthcheck(task_dir: Path, table: dict, section: str) -> Healthcheck | None:
    hc = table.get("healthcheck")
    if hc is None:
        return None
    where = f"task.toml [{section}.healthcheck]"
    if not isinstance(hc, dict) or not isinstance(hc.get("command"), str) or not hc["command"].strip():
        raise _bad(task_dir, f"{where} needs a command (a shell command; exit 0 means healthy)")
    unknown = sorted(set(hc) - {"command", "interval_sec", "timeout_sec", "start_period_sec", "start_interval_sec",
                                "retries"})
    if unknown:
        raise _bad(task_dir, f"{where}: unknown keys {unknown}")
    values = {}
    for key, default in (("interval_sec", 5.0), ("timeout_sec", 30.0), ("start_period_sec", 0.0),
                         ("start_interval_sec", 5.0), ("retries", 3)):
        value = hc.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0 \
                or (key == "retries" and (int(value) != value or value < 1)):
            raise _bad(task_dir, f"{where} {key} must be a {'whole number of at least 1' if key == 'retries' else 'number of seconds'}, got {value!r}")
        values[key] = int(value) if key == "retries" else float(value)
    return Healthcheck(hc["command"], **values)


def _number(task_dir: Path, table: dict, section: str, key: str, default, integer: bool = False):
    value = table.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise _bad(task_dir, f"task.toml [{section}] {key} must be a positive number, got {value!r}")
    if integer:
        if int(value) != value:
            raise _bad(task_dir, f"task.toml [{section}] {key} must be a whole number, got {value!r}")
        return int(value)
    return float(value)


def _cpus(task_dir: Path, env: dict) -> int | float | None:
    """Harbor: int or float; a whole float collapses to int; NaN/inf rejected."""
    value = _number(task_dir, env, "environment", "cpus", None)
    if value is None:
        return None
    return int(value) if float(value).is_integer() else value


def _size_mb(task_dir: Path, env: dict, key_mb: str, legacy_key: str) -> int | None:
    """memory_mb / storage_mb, or the deprecated `memory` / `storage` as Harbor migrates them
    (harbor/models/task/config.py EnvironmentConfig._migrate_legacy_resource_fields and
    _parse_size_to_mb): a string is stripped, upper-cased and must end in G, M or K (int(float(n) *
    1024), int(float(n)), int(float(n) / 1024)), anything else refuses the task ("2048", "2GB" and
    "512Mi" included); a value of another type is dropped; one that disagrees with the *_mb key
    refuses the task."""
    value_mb = _number(task_dir, env, "environment", key_mb, None, integer=True) if key_mb in env else None
    text = env.get(legacy_key)
    if not isinstance(text, str):
        return value_mb
    size = text.strip().upper()
    scale = {"G": 1024.0, "M": 1.0, "K": 1 / 1024}.get(size[-1:])
    try:
        if scale is None:
            raise ValueError
        number = float(size[:-1])
        legacy_mb = int(number / 1024) if size.endswith("K") else int(number * scale)
    except (ValueError, OverflowError):
        raise _bad(task_dir, f"task.toml [environment] {legacy_key} must be a size like \"2G\", \"512M\" or "
                             f"\"64K\" (Harbor's format), got {text!r}") from None
    if value_mb is not None and value_mb != legacy_mb:
        raise _bad(task_dir, f"task.toml [environment] {legacy_key} = {text!r} ({legacy_mb} MB) conflicts with "
                             f"{key_mb} = {value_mb}")
    return legacy_mb


def _table(task_dir: Path, config: dict, name: str) -> dict:
    value = config.get(name, {})
    if not isinstance(value, dict):
        raise _bad(task_dir, f"task.toml [{name}] must be a table, got {type(value).__name__}")
    return value


def _env_table(task_dir: Path, table: dict, section: str) -> dict:
    value = table.get("env", {})
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise _bad(task_dir, f"task.toml [{section}] env must be a table of strings, got {value!r}")
    return dict(value)


def _network_mode(task_dir: Path, table: dict, section: str) -> str:
    """The current `network_mode` first; the deprecated `allow_internet` only when network_mode
    is absent (harbor/models/task/config.py, handle_deprecated_environment_allow_internet)."""
    if "network_mode" in table:
        mode = table["network_mode"]
        if mode not in NETWORK_MODES:
            raise _bad(task_dir, f"task.toml [{section}] network_mode must be one of {list(NETWORK_MODES)}, "
                                 f"got {mode!r}")
        return mode
    allow = table.get("allow_internet")
    if allow is None:
        return DEFAULT_NETWORK_MODE
    if not isinstance(allow, bool):
        raise _bad(task_dir, f"task.toml [{section}] allow_internet must be true or false, got {allow!r}")
    return "public" if allow else "no-network"


def _task_name(task_dir: Path, config: dict) -> str:
    section = config.get("task")
    if section is None:
        return task_dir.name
    if not isinstance(section, dict) or not isinstance(section.get("name"), str):
        raise _bad(task_dir, "task.toml [task] must have a name (\"org/name\")")
    name = section["name"]
    if not TASK_NAME_PATTERN.match(name) or ".." in name:
        raise _bad(task_dir, f"task.toml [task] name must be \"org/name\" (letters, digits, . _ -), got {name!r}")
    return name


def _unsupported(config: dict, env: dict, verifier: dict, agent: dict, task_dir: Path) -> list[str]:
    """What a task asks for that the native (bwrap) runner cannot give, one reason each."""
    out = []
    for step in config.get("steps") or []:
        label = f"[[steps]] {step.get('name')}"
        step_verifier = step.get("verifier") or {}
        if step_verifier.get("environment") is not None or step_verifier.get("environment_mode") == "separate":
            out.append(f"{label}: a separate verifier environment is not supported natively")
        for section in ("agent", "verifier"):
            if (step.get(section) or {}).get("network_mode") is not None:
                out.append(f"{label} [{section}] network_mode: per-phase network policies are not supported natively")
    if env.get("gpus"):
        out.append(f"[environment] gpus = {env['gpus']}: the native runner provides no GPUs")
    if env.get("tpu"):
        out.append("[environment] tpu: the native runner provides no TPUs")
    if str(env.get("os", "linux")).lower() != "linux":
        out.append(f"[environment] os = {env['os']!r}: the native runner runs Linux tasks only")
    if verifier.get("environment") is not None or verifier.get("environment_mode") == "separate":
        out.append("[verifier] separate verifier environment: the native runner verifies in the agent's environment")
    if verifier.get("collect"):
        out.append("[[verifier.collect]] hooks need compose services, which the native runner lacks")
    if env.get("network_mode") == "allowlist":
        out.append("[environment] network_mode = \"allowlist\": the native runner gives either no network or "
                   "the host's")
    for section, table in (("agent", agent), ("verifier", verifier)):
        if table.get("network_mode") is not None:
            out.append(f"[{section}] network_mode: per-phase network policies are not supported natively")
    if env.get("mcp_servers"):
        out.append("[environment] mcp_servers: not supported by the native runner")
    compose = _compose_file(task_dir)
    if compose:
        out.append(f"environment/{compose}: multi-container environments are not supported natively")
    return out


def _compose_file(task_dir: Path) -> str | None:
    for name in ("docker-compose.yaml", "docker-compose.yml", "compose.yaml", "compose.yml"):
        if (task_dir / "environment" / name).is_file():
            return name
    return None


def _load_step(task_dir: Path, table: dict) -> HarborStep:
    name = table["name"]
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        raise _bad(task_dir, f"task.toml [[steps]] name {name!r} is not a portable directory name")
    step_dir = task_dir / "steps" / name
    where = f"steps.{name}"
    if not (step_dir / "instruction.md").is_file():
        raise _bad(task_dir, f"multi-step task: missing steps/{name}/instruction.md")
    if (step_dir / "tests" / "test.sh").is_file():
        tests_root = step_dir
    elif (task_dir / "tests" / "test.sh").is_file():
        tests_root = task_dir
    else:
        raise _bad(task_dir, f"multi-step task: step {name} has no steps/{name}/tests/test.sh and there is no "
                             "shared tests/test.sh")
    agent = table.get("agent") or {}
    verifier = table.get("verifier") or {}
    if not isinstance(agent, dict) or not isinstance(verifier, dict):
        raise _bad(task_dir, f"task.toml [{where}] agent and verifier must be tables")
    min_reward = table.get("min_reward")
    if min_reward is not None and not (
            (isinstance(min_reward, (int, float)) and not isinstance(min_reward, bool))
            or (isinstance(min_reward, dict) and all(isinstance(v, (int, float)) for v in min_reward.values()))):
        raise _bad(task_dir, f"task.toml [{where}] min_reward must be a number or a table of numbers")
    return HarborStep(
        name=name, dir=step_dir,
        instruction=strip_canary((step_dir / "instruction.md").read_text(encoding="utf-8")),
        tests_root=tests_root,
        solution_dir=step_dir / "solution" if (step_dir / "solution").is_dir() else task_dir / "solution",
        agent_timeout=_number(task_dir, agent, f"{where}.agent", "timeout_sec", None),
        verifier_timeout_sec=_number(task_dir, verifier, f"{where}.verifier", "timeout_sec",
                                     DEFAULT_VERIFIER_TIMEOUT_SEC),
        test_sources=[d for d in (task_dir / "tests", step_dir / "tests") if d.is_dir()],
        verifier_env=_env_table(task_dir, verifier, f"{where}.verifier"),
        min_reward=min_reward, healthcheck=_healthcheck(task_dir, table, where))


def load_harbor_task(task_dir: str | Path) -> HarborTask:
    """Read one Harbor task directory; clear errors for missing files and bad task.toml fields."""
    task_dir = Path(task_dir)
    if not task_dir.is_dir():
        raise HarborTaskError(f"Harbor task {task_dir}: not a directory")
    # Third-party tasks are untrusted: nothing in one may lead out of it (termforge.containment).
    found = tree_problem(task_dir)
    if found:
        raise _bad(task_dir, f"{show_path(found[0])} {found[1]}")
    if not (task_dir / "task.toml").is_file():
        raise _bad(task_dir, "missing task.toml")
    try:
        config = tomllib.loads((task_dir / "task.toml").read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise _bad(task_dir, f"task.toml is not valid TOML: {exc}") from None
    raw_steps = config.get("steps") or []
    if not isinstance(raw_steps, list) or not all(isinstance(st, dict) and isinstance(st.get("name"), str)
                                                  for st in raw_steps):
        raise _bad(task_dir, "task.toml [[steps]] entries must each have a name")
    steps = [_load_step(task_dir, st) for st in raw_steps]
    if len({st.name for st in steps}) != len(steps):
        raise _bad(task_dir, "task.toml [[steps]] names must be unique")
    if steps:
        # Harbor has no top-level instruction for a multi-step task; ours is the first step's, for
        # readers of the dataset (decontamination), while each step's agent gets its own.
        instruction = steps[0].instruction
    else:
        # A Windows task's verifier is tests/test.bat (or .ps1/.cmd): it loads, and is reported as
        # unsupported rather than as a missing test.sh.
        linux = str(_table(task_dir, config, "environment").get("os", "linux")).lower() == "linux"
        for required in ("instruction.md", "tests/test.sh") if linux else ("instruction.md",):
            if not (task_dir / required).is_file():
                raise _bad(task_dir, f"missing {required}")
        instruction = strip_canary((task_dir / "instruction.md").read_text(encoding="utf-8"))
    if not instruction.strip():
        raise _bad(task_dir, "instruction.md is empty (after its canary lines)")
    strategy = config.get("multi_step_reward_strategy")
    if strategy not in (None, "mean", "final"):
        raise _bad(task_dir, f"task.toml multi_step_reward_strategy must be \"mean\" or \"final\", got {strategy!r}")
    metadata = _table(task_dir, config, "metadata")
    verifier = _table(task_dir, config, "verifier")
    agent = _table(task_dir, config, "agent")
    env = _table(task_dir, config, "environment")
    solution = _table(task_dir, config, "solution")
    tags = metadata.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise _bad(task_dir, f"task.toml [metadata] tags must be a list of strings, got {tags!r}")
    docker_image = env.get("docker_image")
    if docker_image is not None and not isinstance(docker_image, str):
        raise _bad(task_dir, f"task.toml [environment] docker_image must be a string, got {docker_image!r}")
    dockerfile = task_dir / "environment" / "Dockerfile"
    if not dockerfile.is_file():
        # Harbor accepts any environment/ directory (a compose file, say) or a prebuilt image
        # (harbor/models/task/task.py is_valid_dir); what cannot be built here is native_plan's to say.
        if not docker_image and not (task_dir / "environment").is_dir():
            raise _bad(task_dir, "missing environment/ (and task.toml [environment] names no docker_image)")
        dockerfile = None
    workdir = env.get("workdir")
    if workdir is not None and (not isinstance(workdir, str) or not workdir.startswith("/")):
        raise _bad(task_dir, f"task.toml [environment] workdir must be an absolute path, got {workdir!r}")
    solve_sh = task_dir / "solution" / "solve.sh"
    version = config.get("schema_version", config.get("version"))
    return HarborTask(
        name=_task_name(task_dir, config),
        path=task_dir,
        instruction=instruction,
        config=config,
        version=str(version) if version is not None else None,
        metadata=metadata,
        verifier_timeout_sec=_number(task_dir, verifier, "verifier", "timeout_sec", DEFAULT_VERIFIER_TIMEOUT_SEC),
        agent_timeout=_number(task_dir, agent, "agent", "timeout_sec", None),
        build_timeout_sec=_number(task_dir, env, "environment", "build_timeout_sec", DEFAULT_BUILD_TIMEOUT_SEC),
        cpus=_cpus(task_dir, env),
        memory_mb=_size_mb(task_dir, env, "memory_mb", "memory"),
        workdir=workdir,
        storage_mb=_size_mb(task_dir, env, "storage_mb", "storage"),
        network_mode=_network_mode(task_dir, env, "environment"),
        docker_image=docker_image,
        dockerfile=dockerfile,
        tests_dir=task_dir / "tests",
        test_sh=task_dir / "tests" / "test.sh",
        solve_sh=solve_sh if solve_sh.is_file() else None,
        verifier_env=_env_table(task_dir, verifier, "verifier"),
        solution_env=_env_table(task_dir, solution, "solution"),
        environment_env=_env_table(task_dir, env, "environment"),
        steps=steps,
        multi_step_reward_strategy=strategy,
        unsupported=_unsupported(config, env, verifier, agent, task_dir),
        solution_dir=task_dir / "solution",
        healthcheck=_healthcheck(task_dir, env, "environment"),
    )


_ENV_TEMPLATE = re.compile(r"\$\{([^}:]+)(?::-(.*))?\}")


def resolve_env(values: dict, where: str, host_env: dict | None = None) -> dict:
    """A task.toml env table as Harbor applies it (harbor/utils/env.py, resolve_env_vars): a value
    that is exactly ${VAR} or ${VAR:-default} comes from the host's environment, anything else is
    literal; a template naming an unset variable without a default is an error."""
    host_env = os.environ if host_env is None else host_env
    out = {}
    for key, value in values.items():
        m = _ENV_TEMPLATE.fullmatch(value)
        if not m:
            out[key] = value
        elif m.group(1) in host_env:
            out[key] = host_env[m.group(1)]
        elif m.group(2) is not None:
            out[key] = m.group(2)
        else:
            raise HarborTaskError(f"{where}: {key} = {value!r} names host variable {m.group(1)}, which is not set")
    return out


def _task_dirs(root: Path, required: bool = True) -> list[Path]:
    # A symlinked task directory is listed too: load_harbor_task refuses it if it leads out.
    dirs = [d for d in sorted(root.iterdir()) if d.is_dir() and not d.name.startswith(".")
            and ((d / "task.toml").exists() or (d / "instruction.md").exists())]
    if not dirs and required:
        raise HarborTaskError(f"Harbor dataset {root}: no task directories (with task.toml) found")
    return dirs


def dataset_root(root: str | Path) -> Path:
    """The folder holding a dataset's task folders. Harbor writes a dataset one level down: `harbor
    dataset download ORG/NAME -o OUT` exports to OUT/NAME/<task>/ (harbor/cli/download.py: "In
    export mode, create a dataset-name wrapper directory"), and published corpora keep their task
    folders under one folder (tasks/<task_id>/) beside their metadata. When `root` holds no task
    folder itself, the one subfolder that does is the dataset;
    several such subfolders are an error naming them."""
    root = Path(root)
    if (root / "task.toml").exists() or _task_dirs(root, required=False):
        return root
    holders = [d for d in sorted(root.iterdir()) if d.is_dir() and not d.name.startswith(".")
               and _task_dirs(d, required=False)]
    if len(holders) > 1:
        raise HarborTaskError(f"Harbor dataset {root}: no task folders of its own, and several subfolders hold "
                              f"some ({', '.join(d.name for d in holders[:5])}): name one of them")
    if not holders:
        raise HarborTaskError(f"Harbor dataset {root}: no task directories (with task.toml) found")
    return contained(root, holders[0].name)


def load_harbor_dataset(root: str | Path) -> tuple[list[HarborTask], list[BrokenTask]]:
    """Every loadable task under a Harbor dataset directory, and every directory that is not, with
    its reason: one bad task never hides the others. root may itself be one task."""
    root = Path(root)
    if not root.is_dir():
        raise HarborTaskError(f"Harbor dataset {root}: not a directory")
    root = dataset_root(root)
    dirs = [root] if (root / "task.toml").exists() else _task_dirs(root)
    tasks, broken = [], []
    for d in dirs:
        try:
            if d != root:
                contained(root, d.name)  # a task directory that is a symlink out of the dataset
            tasks.append(load_harbor_task(d))
        except HarborTaskError as exc:
            broken.append(BrokenTask(d.name, d, str(exc)))
        except InputError as exc:
            broken.append(BrokenTask(d.name, d, f"Harbor task {d}: {exc.problem}"))
    names = [t.name for t in tasks]
    for t in list(tasks):
        if names.count(t.name) > 1:
            tasks.remove(t)
            broken.append(BrokenTask(t.name, t.path, f"Harbor task {t.path}: task name {t.name} is used by "
                                                     "another task of the dataset"))
    return tasks, broken


def load_harbor_dir(root: str | Path) -> list[HarborTask]:
    """Every task under a Harbor dataset directory (sorted by directory); root may itself be one
    task. Strict: the first unloadable task is an error (load_harbor_dataset goes on instead).

    A subdirectory counts as a task when it holds task.toml or instruction.md, so a half-written
    task is reported with what it lacks instead of being skipped silently."""
    tasks, broken = load_harbor_dataset(root)
    if broken:
        raise HarborTaskError(broken[0].reason)
    return tasks


# -- Dockerfile interpretation ------------------------------------------------------------------

@dataclass
class DockerInstruction:
    lineno: int
    keyword: str
    args: str
    # The here-documents that follow the instruction's line (RUN/COPY/ADD <<EOF): (delimiter, body).
    heredocs: list = field(default_factory=list)


# A here-document opener in a RUN/COPY/ADD line: `<<EOF`, `<<-EOF`, `<<"EOF"`, `<<'EOF'` (not `<<<`).
HEREDOC = re.compile(r"(?<![<\w])<<(-?)([\"']?)([A-Za-z_][A-Za-z0-9_]*)\2")


def parse_dockerfile(text: str) -> list[DockerInstruction]:
    """Split a Dockerfile into instructions: comments dropped, backslash continuations joined, the
    here-documents after a RUN/COPY/ADD line kept as that instruction's bodies (as BuildKit reads them)."""
    out: list[DockerInstruction] = []
    pending: list[str] = []
    start = 0
    waiting: list[tuple[str, str]] = []  # (strip tabs "-" or "", delimiter) still to be read
    body: list[str] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        if waiting:
            strip, delim = waiting[0]
            if (raw.lstrip("\t") if strip else raw) == delim:
                out[-1].heredocs.append((delim, "".join(line + "\n" for line in body)))
                waiting.pop(0)
                body = []
            else:
                body.append(raw.lstrip("\t") if strip else raw)
            continue
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
        if out[-1].keyword in ("RUN", "COPY", "ADD"):
            waiting = [(m.group(1), m.group(3)) for m in HEREDOC.finditer(args)]
    if waiting:
        raise EnvironmentUnsupported(f"Dockerfile line {out[-1].lineno} ({out[-1].keyword}): the here-document "
                                     f"<<{waiting[0][1]} has no closing {waiting[0][1]} line")
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
    """What a Dockerfile asks for: the image its final stage builds on (base_image, with the Debian
    packages its apt-get install lines name), the other images its stages start from or copy out of
    (other_images: name -> packages), and, for the canonical form (harbor_import's setup.sh), its
    steps, or canonical_blocker naming the first feature that form cannot carry (buildah builds
    the Dockerfile as written either way)."""

    base_image: str
    apt_packages: list[str]
    steps: list
    workdir: str
    env: dict
    other_images: dict = field(default_factory=dict)
    canonical_blocker: str | None = None
    instructions: list = field(default_factory=list)
    # Instruction index -> the image a FROM or COPY --from there names (not a stage, not scratch).
    image_refs: dict = field(default_factory=dict)


_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))")


def _substitute(text: str, values: dict) -> str:
    def repl(m: re.Match) -> str:
        name = m.group(1) or m.group(3)
        if name in values:
            return values[name]
        return m.group(2) or ""

    return _VAR.sub(repl, text)


def _image_name_tag(image: str) -> tuple[str, str]:
    ref = image.split("@")[0]
    name, _, tag = ref.rpartition(":") if ":" in ref.rsplit("/", 1)[-1] else (ref, "", "")
    return name.rsplit("/", 1)[-1].lower(), tag.lower()


def _version_tuple(text: str) -> tuple[int, ...]:
    m = re.match(r"\d+(?:[.-]\d+)*", text)
    return tuple(int(x) for x in re.split(r"[.-]", m.group(0))) if m else ()


@dataclass(frozen=True)
class NativeOptions:
    """How the native runner may reach outside the machine (eval.tbench keys, docs/terminal-bench.md).

    pull_images: a Dockerfile's FROM that the image store lacks is pulled from its registry
      (`termforge images pull`) when the task is built; off, it is an environment error naming
      the commands that add it.
    network_namespace: the named network namespace (`ip netns add NAME`, /run/netns/NAME) whose
      network the agent and verifier of a task with public network get (the runner must be root
      to enter it); None: each sandbox's own namespace, connected to the outside by slirp4netns
      (runtime.process.PublicNetwork: the host's loopback and abstract sockets out of reach).
    build_network: the Dockerfile's build (RUN apt-get/pip/curl, ADD of a URL) gets network (its own
      namespace, connected by slirp4netns) and the host's CA bundle, as `docker build` does; off,
      it runs offline and a step that fetches software is refused up front."""

    pull_images: bool = False
    network_namespace: str | None = None
    build_network: bool = True

    def netns_path(self) -> str | None:
        if not self.network_namespace:
            return None
        name = self.network_namespace
        if "/" in name or name in (".", ".."):
            raise TermforgeError(f"eval.tbench.network_namespace: {name!r} is not a network namespace name "
                                 "(one `ip netns add` made)")
        path = f"/run/netns/{name}"
        if not os.path.exists(path):
            raise TermforgeError(f"eval.tbench.network_namespace: no network namespace {name!r} ({path} is missing; "
                                 f"make it with `ip netns add {name}`)")
        return path


def check_base_image(image: str, pull: bool = False) -> str:
    """The base termforge builds for a Dockerfile's FROM `image` (a declared base's name): the
    image itself, never the host. With `pull`, an image the store lacks is pulled from its
    registry first; EnvironmentUnsupported names an image termforge does not have (or could not pull)."""
    from termforge.images import find_base_for

    decl = find_base_for(image)
    if decl is None and pull:
        from termforge.images.store import ImageStore

        try:
            ImageStore().pull(image)
        except TermforgeError as exc:
            raise EnvironmentUnsupported(f"base image {image} could not be pulled: {exc}") from None
        decl = find_base_for(image)
    if decl is None:
        raise EnvironmentUnsupported(
            f"base image {image} is not in termforge's image store; add it with "
            f"`termforge images add {image} TARBALL|OCI` or `termforge images pull docker://{image}`, or let the "
            "runner pull it (eval.tbench.pull_images: true)")
    return decl.name


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
        # A local .deb is installed by the build's own apt-get (as root of the build's namespace).
        return [re.split(r"[=/]", a, maxsplit=1)[0] for a in args
                if not (a.startswith(("/", "./")) or a.endswith(".deb"))]
    return None  # remove, purge...: the build's apt-get runs them


def _is_apt_housekeeping(words: list[str]) -> bool:
    """`rm -rf /var/lib/apt/lists/*` and the like: they only tidy apt's own caches."""
    if not words or words[0] != "rm":
        return False
    targets = [w for w in words[1:] if not w.startswith("-")]
    return bool(targets) and all(t.startswith(("/var/lib/apt", "/var/cache/apt", "/var/cache/debconf",
                                               "/var/log/apt", "/var/log/dpkg")) for t in targets)


def _check_downloader(words: list[str], where: str) -> None:
    """For an offline build (eval.tbench.build_network: false): a step that fetches software."""
    if not words:
        return
    prog = posixpath.basename(words[0])
    offline = "needs network at build time, and the build runs offline (eval.tbench.build_network: false)"
    if prog in ("pip", "pip3") or (prog.startswith("python") and words[1:3] == ["-m", "pip"]):
        if "install" in words:
            raise EnvironmentUnsupported(f"{where}: pip install {offline}")
    elif prog == "git" and "clone" in words:
        raise EnvironmentUnsupported(f"{where}: git clone {offline}")
    elif prog in DOWNLOADERS or FETCHING_SUBCOMMANDS.get(prog, set()) & set(words[1:]):
        raise EnvironmentUnsupported(f"{where}: `{' '.join(words[:2])}` fetches software and {offline}")


# RUN --mount types a build can give: a cache (empty here), a bind of the context or a stage, a tmpfs.
RUN_MOUNTS = ("cache", "bind", "tmpfs")


def _plan_run(inst: DockerInstruction, shell: list[str], env: dict, cwd: str, apt: list[str],
              network: bool, blockers: list[str]) -> RunStep | None:
    """A RUN line's step for the canonical form, its apt-get install packages added to `apt`;
    EnvironmentUnsupported for what no build here can give it (a secret or ssh mount, a fetch
    without build network)."""
    where = f"Dockerfile line {inst.lineno} (RUN)"
    args = inst.args
    while (m := re.match(r"--(\w+)=(\S+)\s*", args)):
        flag, value = m.group(1), m.group(2)
        kind = re.search(r"(?:^|,)type=(\w+)", value)
        if flag == "mount" and (kind.group(1) if kind else "bind") not in RUN_MOUNTS:
            raise EnvironmentUnsupported(f"{where}: RUN --mount={value}: the build is given no secrets or ssh agent")
        if flag not in ("mount", "network"):
            raise EnvironmentUnsupported(f"{where}: RUN --{flag}={value} is not supported by the buildah build")
        if flag == "mount" and not (kind and kind.group(1) == "cache"):
            blockers.append(f"{where}: RUN --mount={value}")
        args = args[m.end():]
    check = (lambda words: _check_downloader(words, where)) if not network else (lambda words: None)
    if inst.heredocs:
        blockers.append(f"{where}: a heredoc")
        for _delim, body in inst.heredocs:
            for _sep, segment in _split_shell(body):
                words = _command_words(_substitute(segment, env))
                apt.extend(_apt_packages(words, where) or [])
                check(words)
        return None
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
            check(words)
            return RunStep(inst.lineno, argv, dict(env), cwd, shlex.join(argv))
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
            check(words)
            if _fetches(words):
                blockers.append(f"{where}: `{' '.join(words[:2])}` fetches at build time")
            any_real = any_real or bool(segment.strip())
        kept.append(f"{sep}{segment}")
    if not any_real:
        return None
    command = "".join(kept).strip()
    return RunStep(inst.lineno, [*shell, command], dict(env), cwd, command)


def _fetches(words: list[str]) -> bool:
    try:
        _check_downloader(words, "")
    except EnvironmentUnsupported:
        return True
    return False


def _resolve_dest(dest: str, workdir: str, where: str, blockers: list[str]) -> str:
    path = posixpath.normpath(dest if dest.startswith("/") else posixpath.join(workdir or "/", dest))
    if not (path in ("/tmp", TASK_ROOT) or path.startswith(("/tmp/", TASK_ROOT + "/"))):
        blockers.append(f"{where}: destination {path} is outside {TASK_ROOT}")
    return path


def _copy_words(inst: DockerInstruction, where: str) -> tuple[dict, list[str]]:
    """A COPY/ADD line's --flags (name -> value) and its other words."""
    args = inst.args
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
    flags = {}
    while words and words[0].startswith("--"):
        name, _, value = words.pop(0)[2:].partition("=")
        flags[name] = value
    return flags, words


def _plan_copy(inst: DockerInstruction, values: dict, workdir: str, context: Path, network: bool,
               blockers: list[str]) -> CopyStep | None:
    """A COPY/ADD line's step for the canonical form (None when it copies out of a stage or an
    image, or writes here-documents); EnvironmentUnsupported for a source that cannot be."""
    where = f"Dockerfile line {inst.lineno} ({inst.keyword})"
    flags, words = _copy_words(inst, where)
    chmod = None
    for name, value in flags.items():
        if name == "chmod":
            if not re.fullmatch(r"[0-7]{3,4}", value):
                raise EnvironmentUnsupported(f"{where}: only octal --chmod is supported, got {value!r}")
            chmod = int(value, 8)
        elif name not in ("chown", "link", "from"):
            raise EnvironmentUnsupported(f"{where}: --{name} is not supported by the buildah build")
    words = [_substitute(w, values) for w in words]
    if len(words) < 2:
        raise EnvironmentUnsupported(f"{where}: needs at least one source and a destination")
    *sources, dest = words
    dest_path = _resolve_dest(dest, workdir, where, blockers)
    if "from" in flags:
        blockers.append(f"{where}: COPY --from")
        return None
    if inst.heredocs:
        if len(inst.heredocs) != len(sources):
            raise EnvironmentUnsupported(f"{where}: here-documents and context files in one {inst.keyword}")
        blockers.append(f"{where}: a heredoc")
        return None
    resolved: list[Path] = []
    root = context.resolve()
    for src in sources:
        if re.match(r"^[a-z]+://", src):
            if not network:
                raise EnvironmentUnsupported(f"{where}: remote source {src} needs build network "
                                             "(eval.tbench.build_network is off)")
            blockers.append(f"{where}: remote source {src}")
            continue
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
    dest_is_dir = dest.endswith("/") or len(resolved) > 1
    return CopyStep(inst.lineno, resolved, dest_path, dest_is_dir, chmod, inst.keyword == "ADD")


@dataclass
class _Stage:
    """One FROM of a Dockerfile as the planner follows it."""

    name: str | None
    root: str | None  # the image it builds on, through the stages it starts from; None: scratch
    env: dict = field(default_factory=dict)
    args: dict = field(default_factory=dict)
    workdir: str = ""
    shell: list = field(default_factory=lambda: ["/bin/sh", "-c"])


def _plan_from(inst: DockerInstruction, stages: list[_Stage], global_args: dict, pull: bool,
               resolve_from: bool) -> tuple[_Stage, str | None]:
    """The stage a FROM line starts, and the image it names (None: a stage or scratch)."""
    where = f"Dockerfile line {inst.lineno} (FROM)"
    words = [w for w in inst.args.split() if not w.startswith("--")]
    if not words:
        raise EnvironmentUnsupported(f"{where}: FROM names no image")
    ref = _substitute(words[0], {"PATH": DOCKER_DEFAULT_PATH, **global_args})
    alias = words[2].lower() if len(words) >= 3 and words[1].lower() == "as" else None
    parent = next((st for st in reversed(stages) if st.name and st.name == ref.lower()), None)
    if parent is not None:
        return _Stage(alias, parent.root, dict(parent.env), {}, parent.workdir, list(parent.shell)), None
    if ref == "scratch":
        return _Stage(alias, None), None
    if resolve_from:
        try:
            check_base_image(ref, pull)
        except EnvironmentUnsupported as exc:
            raise EnvironmentUnsupported(f"{where}: {exc}") from None
    return _Stage(alias, ref), ref


def plan_dockerfile(dockerfile: Path, context: Path, pull: bool = False, resolve_from: bool = True,
                    network: bool = True) -> BuildPlan:
    """Read a Dockerfile for what its buildah build needs (the images its stages start from and copy
    out of, each with the Debian packages its apt-get install lines name); EnvironmentUnsupported
    names, in one line, what no build here can give it. `pull`: a FROM image the store lacks is
    pulled (NativeOptions.pull_images); `resolve_from` False: images are taken as ones a registry
    serves, neither looked up nor pulled; `network` False: the build runs offline
    (eval.tbench.build_network), so a step that fetches software is refused up front."""
    instructions = parse_dockerfile(Path(dockerfile).read_text(encoding="utf-8"))
    apt: dict[str | None, list[str]] = {}
    image_refs: dict[int, str] = {}
    steps: list = []
    blockers: list[str] = []
    global_args: dict[str, str] = {}
    stages: list[_Stage] = []
    stage: _Stage | None = None
    for index, inst in enumerate(instructions):
        where = f"Dockerfile line {inst.lineno} ({inst.keyword})"
        if inst.keyword == "FROM":
            if stage is not None:
                blockers.append(f"{where}: a multi-stage build")
            stage, ref = _plan_from(inst, stages, global_args, pull, resolve_from)
            stages.append(stage)
            if ref:
                image_refs[index] = ref
            apt.setdefault(stage.root, [])
            continue
        if stage is None and inst.keyword != "ARG":
            raise EnvironmentUnsupported(f"{where}: instruction before FROM")
        values = {"PATH": DOCKER_DEFAULT_PATH, **(stage.args if stage else global_args), **(stage.env if stage else {})}
        if inst.keyword == "RUN":
            step = _plan_run(inst, stage.shell, {**stage.args, **stage.env}, stage.workdir or "/", apt[stage.root],
                             network, blockers)
            if step is not None:
                steps.append(step)
        elif inst.keyword in ("COPY", "ADD"):
            step = _plan_copy(inst, values, stage.workdir, context, network, blockers)
            if step is not None:
                steps.append(step)
            source = _copy_words(inst, where)[0].get("from")
            if source is not None and not source.isdigit() \
                    and not any(st.name == source.lower() for st in stages[:-1]):
                image = _substitute(source, values)
                if resolve_from:
                    try:
                        check_base_image(image, pull)
                    except EnvironmentUnsupported as exc:
                        raise EnvironmentUnsupported(f"{where}: COPY --from={source}: {exc}") from None
                image_refs[index] = image
                apt.setdefault(image, [])
        elif inst.keyword == "WORKDIR":
            target = _substitute(inst.args.strip().strip('"'), values)
            path = posixpath.normpath(target if target.startswith("/") else posixpath.join(stage.workdir or "/", target))
            if path != TASK_ROOT and not path.startswith(TASK_ROOT + "/"):
                blockers.append(f"{where}: WORKDIR {path} is outside {TASK_ROOT}")
            stage.workdir = path
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
                    stage.env[key] = _substitute(value or "", values)
                elif stage is None:
                    # Before the first FROM: for FROM lines, and for stages that declare it again.
                    global_args.setdefault(key, _substitute(value or "", values))
                elif value is not None:
                    stage.args[key] = _substitute(value, values)
                elif key in global_args:
                    stage.args[key] = global_args[key]
        elif inst.keyword == "SHELL":
            try:
                shell_argv = json.loads(inst.args)
            except json.JSONDecodeError:
                shell_argv = None
            if not (isinstance(shell_argv, list) and shell_argv and all(isinstance(a, str) for a in shell_argv)):
                raise EnvironmentUnsupported(f"{where}: SHELL must be a JSON array")
            stage.shell = shell_argv
        elif inst.keyword in IGNORED_INSTRUCTIONS:
            continue
        else:
            raise EnvironmentUnsupported(f"{where}: unsupported instruction {inst.keyword}")
    if stage is None:
        raise EnvironmentUnsupported("Dockerfile has no FROM")
    if stage.root is None:
        raise EnvironmentUnsupported("the final stage builds FROM scratch: the native runner runs tasks on an "
                                     "image's root filesystem that a base image starts")
    others = {image: sorted(set(pkgs)) for image, pkgs in apt.items() if image and image != stage.root}
    return BuildPlan(stage.root, sorted(set(apt[stage.root])), steps, stage.workdir or TASK_ROOT, stage.env,
                     others, blockers[0] if blockers else None, instructions, image_refs)


def buildah_dockerfile(plan: BuildPlan, names: dict[str, str]) -> str:
    """The Dockerfile handed to buildah: `plan`'s instructions as written, every image a FROM or
    COPY --from names replaced by the name the build's storage holds it under (`names`), and
    here-documents (which buildah 1.28 does not read) turned into the shell steps BuildKit runs:
    a RUN's script with its here-documents, a COPY's files written by a root step."""
    lines: list[str] = []
    shell, user = ["/bin/sh", "-c"], ""
    for index, inst in enumerate(plan.instructions):
        args = inst.args
        if inst.keyword == "FROM":
            shell, user = ["/bin/sh", "-c"], ""
            words = [w for w in args.split() if not w.startswith("--")]
            if index in plan.image_refs:
                words[0] = names[plan.image_refs[index]]
            args = " ".join(words)
        elif inst.keyword == "SHELL":
            shell = json.loads(args)
        elif inst.keyword == "USER":
            user = args
        elif inst.keyword in ("COPY", "ADD"):
            flags, words = _copy_words(inst, "")
            if inst.heredocs:
                lines.extend(_heredoc_copy(inst, flags, words[-1], user))
                continue
            if index in plan.image_refs or "link" in flags:  # else the line as written
                if index in plan.image_refs:
                    flags["from"] = names[plan.image_refs[index]]
                flags.pop("link", None)  # a cache hint of BuildKit's: the same files either way
                args = " ".join([*(f"--{k}={v}" for k, v in flags.items()), json.dumps(words)])
        if inst.keyword == "RUN" and inst.heredocs:
            lines.append(_heredoc_run(inst, shell))
        else:
            lines.append(f"{inst.keyword} {args}")
    return "\n".join(lines) + "\n"


def _heredoc_run(inst: DockerInstruction, shell: list[str]) -> str:
    flags = ""
    args = inst.args
    while (m := re.match(r"--\w+=\S+\s*", args)):
        flags += m.group(0)
        args = args[m.end():]
    only = HEREDOC.fullmatch(args.strip())
    if only and len(inst.heredocs) == 1:
        delim, body = inst.heredocs[0]
        if body.startswith("#!"):
            # A script with its own interpreter: written to a file and run, as BuildKit does.
            script = (f"f=$(mktemp) && cat > \"$f\" <<'{delim}'\n{body}{delim}\nchmod +x \"$f\" && \"$f\"; "
                      "s=$?; rm -f \"$f\"; exit $s")
        else:
            script = body
    else:
        script = args + "\n" + "".join(f"{body}{delim}\n" for delim, body in inst.heredocs)
    return f"RUN {flags}{json.dumps([*shell, script])}"


def _heredoc_copy(inst: DockerInstruction, flags: dict, dest: str, user: str) -> list[str]:
    """COPY <<NAME dest: the files written by a root step (the image's /bin/sh), owned as --chown says."""
    many = len(inst.heredocs) > 1 or dest.endswith("/")
    parts = []
    for delim, body in inst.heredocs:
        target = shlex.quote(posixpath.join(dest, delim) if many else dest)
        parts.append(f"mkdir -p \"$(dirname {target})\" && cat > {target} <<'{delim}'\n{body}{delim}\n")
        if flags.get("chmod"):
            parts.append(f"chmod {shlex.quote(flags['chmod'])} {target}\n")
        if flags.get("chown"):
            parts.append(f"chown {shlex.quote(flags['chown'])} {target}\n")
    lines = ["USER 0"] if user else []
    lines.append(f"RUN {json.dumps(['/bin/sh', '-ec', ''.join(parts)])}")
    return lines + ([f"USER {user}"] if user else [])


def check_test_sh_offline(task: HarborTask) -> None:
    """Terminal-Bench 2.0's test.sh installs curl and uv and fetches pytest when it runs: with the
    network Harbor gives by default that works natively too (the hosts it fetches from are probed
    before it runs: verifier_hosts), but a task whose network_mode is no-network could only ever
    write reward 0, so that is said up front."""
    if task.allow_internet:
        return
    for script in task.test_scripts:
        text = script.read_text(encoding="utf-8", errors="replace")
        rel = script.relative_to(task.path)
        for lineno, line in enumerate(text.splitlines(), 1):
            code = line.split("#", 1)[0]
            if TEST_SH_INSTALLERS.search(code):
                raise EnvironmentUnsupported(
                    f"{rel} line {lineno} installs its verifier toolchain at run time ({code.strip()}), and the "
                    f"task's network_mode is {task.network_mode}: it could never install it")


def verifier_apt_packages(task: HarborTask) -> list[str]:
    """The Debian packages a test.sh installs with apt-get when it runs (Terminal-Bench 2.0's
    `apt-get install -y curl` before fetching uv). The image's root is read-only under the native
    runner, so they go into the task's derived base instead (an agent could have installed them
    under Harbor too, as root with network); the script's own apt-get then fails past them."""
    pkgs: list[str] = []
    for script in task.test_scripts:
        rel = script.relative_to(task.path)
        for lineno, line in enumerate(script.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            code = line.split("#", 1)[0]
            for _sep, segment in _split_shell(code):
                words = _command_words(segment)
                try:
                    found = _apt_packages(words, f"{rel} line {lineno}")
                except EnvironmentUnsupported:
                    continue  # not an install: whatever it does, it does when the verifier runs
                pkgs.extend(p for p in found or [] if p not in pkgs)
    return sorted(pkgs)


URL_HOST = re.compile(r"\b(https?)://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(?::(\d+))?")


def verifier_hosts(task: HarborTask) -> list[tuple[str, int]]:
    """The (host, port) pairs a test.sh names in http(s) URLs outside comments: where it fetches
    its verifier toolchain from (astral.sh, pypi.org, a mirror). Probed before the verifier runs,
    so an unreachable one is an environment error naming it, never a reward of 0."""
    found: list[tuple[str, int]] = []
    for script in task.test_scripts:
        for line in script.read_text(encoding="utf-8", errors="replace").splitlines():
            code = line.split("#", 1)[0] if not line.lstrip().startswith("#") else ""
            for scheme, host, port in URL_HOST.findall(code):
                pair = (host.strip("[]"), int(port) if port else (443 if scheme == "https" else 80))
                if pair not in found and "$" not in host:
                    found.append(pair)
    return found


def native_plan(task: HarborTask, pull: bool = False, resolve_from: bool = True, network: bool = True) -> BuildPlan:
    """Everything the native runner can tell about a task without building it: the BuildPlan, or
    EnvironmentUnsupported with the first reason it cannot run (unsupported task.toml features, a
    prebuilt image, a test.sh that installs its toolchain, a Dockerfile it cannot interpret, a base
    image termforge does not have)."""
    if task.unsupported:
        raise EnvironmentUnsupported("; ".join(task.unsupported))
    if task.dockerfile is None:
        if task.docker_image:
            raise EnvironmentUnsupported(f"the prebuilt image {task.docker_image} cannot run under bwrap "
                                         "(no environment/Dockerfile)")
        raise EnvironmentUnsupported("environment/ has no Dockerfile for the native runner to build")
    check_test_sh_offline(task)
    return plan_dockerfile(task.dockerfile, task.environment_dir, pull, resolve_from, network)


def native_blocker(task: HarborTask, assume_pullable: bool = False, network: bool = True) -> str | None:
    """Why the native runner cannot run this task (None when it can, as far as can be told
    without building it). `assume_pullable`: FROM images are taken as pullable (eval.tbench.pull_images
    on, the registry reachable) instead of looked up in the store."""
    try:
        native_plan(task, resolve_from=not assume_pullable, network=network)
    except EnvironmentUnsupported as exc:
        return str(exc)
    return None


# -- building -----------------------------------------------------------------------------------

def harbor_image_digest(task: HarborTask, base_digest: str = "") -> str:
    """The cache key of a Harbor task's image: its environment/ and the base it builds on."""
    return stable_hash([BUILDER_VERSION, tree_digest(task.environment_dir), task.allow_internet, base_digest], 24)


def build_harbor_image(task: HarborTask, images_dir: str | Path, limits: Limits | None = None,
                       timeout: float | None = None, image_cache: str | Path | None = None,
                       options: NativeOptions | None = None) -> BuildResult:
    """Build a Harbor task's environment/Dockerfile with buildah, offline, on the base its FROM
    names (termforge.images.dockerfile), and make the result a bwrap image: the built root
    filesystem read-only as /, its /app the task layer (images_dir/<name>/layer + image.json, the
    layout BwrapRuntime.start expects). A failure is an environment error: BuildResult.ok is False
    and reason says why (buildah's log tail included). Content-addressed twice: the Dockerfile
    build by Dockerfile + context + base digest in the image cache, and this task image by
    environment/ + base digest, so an unchanged task is not rebuilt."""
    from termforge.images import ensure_task_base
    from termforge.images.dockerfile import BuilderError, DockerfileError, build_dockerfile, find_built

    start = time.monotonic()

    def fail(reason: str, log: str = "", infra: bool = False) -> BuildResult:
        reason = f"task {task.name}: {reason}"
        return BuildResult(False, None, reason, (log + "\n" + reason).strip(), time.monotonic() - start,
                           infra=infra)

    options = options or NativeOptions()
    try:
        plan = native_plan(task, options.pull_images, network=options.build_network)
    except EnvironmentUnsupported as exc:
        return fail(str(exc))
    # The Dockerfile's apt-get install packages go into a derived base (built once from the Debian
    # mirror, shared): the offline build's apt-get install then finds them installed.
    request = {"base": plan.base_image, "apt_packages": sorted(set(plan.apt_packages) | set(verifier_apt_packages(task)))}
    try:
        base = ensure_task_base(request["base"], request["apt_packages"], image_cache)
        # The other images its stages start from or copy out of, under the names buildah reads.
        others = {image: ensure_task_base(image, pkgs, image_cache) for image, pkgs in plan.other_images.items()}
    except TermforgeError as exc:
        return fail(f"base image {plan.base_image} + {request['apt_packages']}: {exc}")
    names = {image: f"localhost/termforge-base:{b.key}" for image, b in [(plan.base_image, base), *others.items()]}
    final = contained(images_dir, task.slug, where=task.path)
    digest = harbor_image_digest(task, " ".join(f"{b.digest} {b.key}" for b in [base, *others.values()])
                                 + (" offline" if not options.build_network else ""))
    meta_path = final / "image.json"
    if meta_path.exists():
        meta = read_json(meta_path)
        built = find_built((meta.get("dockerfile") or {}).get("key", ""), image_cache)
        if meta.get("digest") == digest and meta.get("backend") == "bwrap" and built is not None:
            log = (final / "build.log").read_text() if (final / "build.log").exists() else ""
            return BuildResult(True, _image(task, final, meta, str(built.rootfs)), "cached", log, 0.0, cached=True)
    timeout = float(timeout or task.build_timeout_sec)
    limits = limits or Limits(wall_sec=timeout, cpu_sec=int(timeout),
                              memory_mb=max(task.memory_mb or 0, NATIVE_MEMORY_MB))
    header = (f"# {BUILDER_VERSION}: FROM {plan.base_image} = base {base.record['name']} {base.digest[:19]}"
              f" (apt packages {request['apt_packages']})")
    try:
        built = build_dockerfile(task.environment_dir, task.dockerfile, base, timeout=timeout, cache=image_cache,
                                 log=lambda _msg: None, what=f"task {task.name}",
                                 text=buildah_dockerfile(plan, names), others=list(others.values()),
                                 network=options.build_network)
    except BuilderError as exc:
        return fail(f"not built, and not for its environment/Dockerfile's sake: {exc}", header, infra=True)
    except DockerfileError as exc:
        return fail(f"environment/Dockerfile did not build: {exc}", header)
    build_log = built.dir / "build.log"
    log_text = header + "\n" + (build_log.read_text(errors="replace") if build_log.exists() else "")
    stage = staging_dir(final)
    try:
        layer = stage / "layer"
        app = built.rootfs / TASK_ROOT.lstrip("/")
        if app.is_dir() and not app.is_symlink():
            problems = trees.copy_tree(app, layer, trees.Bounds(limits.tree_depth, limits.tree_entries, None))
            if problems:
                return fail(f"the built image's {TASK_ROOT} cannot be copied: {problems[0]}", log_text)
        else:
            layer.mkdir()
        unwalkable = layer_problem(layer, limits)
        if unwalkable:
            return fail(f"the build left a task layer the host cannot walk: {unwalkable}", log_text)
        layer_digest = tree_digest(layer)
        try:
            config = ImageConfig.from_oci(built.record["config"], f"task {task.name}: the built image")
        except TermforgeError as exc:
            return fail(str(exc), log_text)
        # The whole Env, as Docker gives it to every process: the FROM image's own (its PATH with the
        # image's toolchain) with the Dockerfile's ENV over it; the WORKDIR likewise inherited.
        workdir = config.workdir if config.workdir not in ("", "/") else TASK_ROOT
        meta = {"task_id": task.name, "backend": "bwrap", "digest": digest, "allow_network": task.allow_internet,
                "kind": "harbor", "builder": BUILDER_VERSION, "base_image": plan.base_image,
                "apt_packages": plan.apt_packages, "workdir": workdir, "env": config.env,
                "image_config": config.to_record(),
                "rootfs": "dockerfile", "base_request": request, "base": base.ref(), "layer_digest": layer_digest,
                "dockerfile": {"key": built.key, "manifest_digest": built.digest,
                               "build_seconds": built.record.get("build_seconds")},
                "image_digest": built.digest}
        (stage / "build.log").write_text(log_text)
        atomic_write_json(stage / "image.json", meta)
        publish_dir(stage, final)
        stage = None
        return BuildResult(True, _image(task, final, meta, str(built.rootfs)), "built", log_text,
                           time.monotonic() - start)
    except OSError as exc:
        return fail(f"making the task image from the build failed: {exc}", log_text)
    finally:
        if stage is not None:
            trees.remove_tree(stage)


def _image(task: HarborTask, path: Path, meta: dict, rootfs: str) -> Image:
    return Image(task.slug, "bwrap", path, meta["digest"], bool(meta.get("allow_network", False)),
                 meta={**image_summary(meta),
                       **{k: meta[k] for k in ("workdir", "env", "base_image", "apt_packages", "image_config") if k in meta}},
                 rootfs=rootfs)


class HarborSession(BwrapSession):
    """A bwrap session over a Harbor task's layer: commands start in the task's [environment]
    workdir, else the Dockerfile's WORKDIR, with its ENV (as `docker exec` into the built container
    would: harbor/environments/docker/docker.py exec, cwd or the task's workdir)."""

    def __init__(self, image: Image, limits: Limits, work_root: Path | None = None, workdir: str | None = None,
                 netns: str | None = None, env: dict | None = None):
        """`env`: the task's [environment].env, over the image's Env (the container's environment:
        the entrypoint, agent, oracle and verifier all see it)."""
        super().__init__(image, limits, work_root)
        if netns:
            from termforge.runtime.bwrap import NetworkNamespace

            self.netns = NetworkNamespace(netns)
        config = image.meta.get("image_config") or {}
        if "user" in config:
            # As Docker runs every process as the image's User (root when it names none). Inside the
            # sandbox only: the namespace maps the session's unprivileged uid, capabilities dropped.
            try:
                self.sandbox_user = resolve_user(config["user"], self.rootfs)
            except TermforgeError as exc:
                self.stop()
                raise EnvironmentUnsupported(f"task {image.task_id}: {exc}") from None
        try:
            # The image's filesystem writable as the container's layer is, under the disk cap.
            self.make_root_writable()
        except TermforgeError:
            self.stop()
            raise
        # (BwrapSession.workdir is the host directory holding this session's copy of the layer.)
        self.task_workdir = workdir or image.meta.get("workdir", TASK_ROOT)
        # The image's whole Env (its own and its Dockerfile's), as the engine starts every process.
        self.image_env = {**image.meta.get("env", {}), **(env or {})}
        if workdir:
            missing = self._missing_dir(workdir)
            if missing:
                self.stop()
                raise EnvironmentUnsupported(f"task {image.task_id}: [environment] workdir = {workdir!r}: {missing}")
        entrypoint = (image.meta.get("image_config") or {}).get("entrypoint") or []
        if entrypoint:
            self._run_entrypoint(list(entrypoint))

    def _run_entrypoint(self, entrypoint: list[str]) -> None:
        """The image's Entrypoint, run once as the container starts: Harbor starts it with the
        command `sh -c "sleep infinity"` (harbor/environments/docker/docker-compose-build.yaml), so
        the entrypoint does its setup and then execs that command; here the command is one that
        ends at once. What the setup leaves in the writable layer stays for the session; an
        entrypoint that fails is the environment's error, as a container that exits at start is."""
        res = super().exec("", argv=[*entrypoint, "sh", "-c", "exit 0"], env=self.image_env, cwd=self.task_workdir,
                           timeout=min(self.limits.wall_sec, ENTRYPOINT_TIMEOUT_SEC))
        if res.exit_code != 0:
            tail = " | ".join((res.stderr or res.stdout).strip().splitlines()[-2:])[:300]
            self.stop()
            raise EnvironmentUnsupported(f"task {self.image.task_id}: the image's Entrypoint {entrypoint} exited "
                                         f"{res.exit_code} when the container started{': ' + tail if tail else ''}")

    def _missing_dir(self, path: str) -> str | None:
        """Why `path` is no directory in the sandbox (its layer at /app, else the image), or None."""
        rel = posixpath.relpath(posixpath.normpath(path), TASK_ROOT)
        if not rel.startswith(".."):
            host = self.layer / rel
        elif str(self.rootfs) == HOST_ROOTFS:
            return None  # the host's /usr and /etc: nothing else of it is visible, let the exec say
        else:
            host = Path(self.rootfs) / posixpath.normpath(path).lstrip("/")
        if host.is_symlink() or not host.is_dir():
            return "no such directory in the task's image"
        return None

    def exec(self, command: str, timeout: float | None = None, env: dict | None = None, cwd: str | None = None,
             **kwargs):
        env = {**self.image_env, **(env or {})}
        if kwargs.get("keep_home", True):
            return super().exec(command, timeout=timeout, env=env, cwd=cwd or self.task_workdir, **kwargs)
        # The verifier: a writable home of its own, empty, never the agent's (whose shell rc files
        # it could have poisoned). Harbor's test.sh installs its toolchain there (uv into ~/.local).
        from termforge.runtime.base import Bind
        from termforge.runtime.bwrap import chown_tree

        home = Path(tempfile.mkdtemp(prefix="verifier-home-", dir=self.workdir))
        try:
            chown_tree(home, self.uid)
            kwargs["binds"] = [*kwargs.get("binds", ()), Bind(home, "/home/user", writable=True)]
            return super().exec(command, timeout=timeout, env=env, cwd=cwd or self.task_workdir, **kwargs)
        finally:
            trees.remove_tree(home)

    def open_shell(self, env: dict | None = None):
        """The agent's persistent shell, with the image's ENV, started in the working directory."""
        return super().open_shell(env={**self.image_env, **(env or {})}, cwd=self.task_workdir)

    def unreachable(self, hosts: list[tuple[str, int]], timeout: float = 30.0) -> list[str]:
        """Which of `hosts` (host, port) a TCP connection from this session's sandbox does not
        reach (name resolution included): the verifier's own network, whatever it is (none, the
        host's, a configured namespace). Every host not confirmed reachable is listed."""
        if not hosts:
            return []
        if not self.image.allow_network:
            return [f"{h}:{p}" for h, p in hosts]
        checks = "; ".join(f"(exec 3<>/dev/tcp/{shlex.quote(h)}/{p}) 2>/dev/null && echo {shlex.quote(f'ok {h}:{p}')}"
                           for h, p in hosts)
        res = BwrapSession.exec(self, checks, timeout=timeout, env=self.image_env, cwd="/")
        reached = {line[3:] for line in res.stdout.splitlines() if line.startswith("ok ")}
        return [f"{h}:{p}" for h, p in hosts if f"{h}:{p}" not in reached]


def start_harbor_session(image: Image, limits: Limits | None = None, work_root: Path | None = None) -> HarborSession:
    return HarborSession(image, limits or Limits(), work_root)


__all__ = [
    "HarborStep", "HarborTask", "HarborTaskError", "EnvironmentUnsupported", "HarborSession", "BuildPlan", "BrokenTask",
    "load_harbor_task", "load_harbor_dir", "load_harbor_dataset", "dataset_root", "strip_canary", "check_base_image", "resolve_env",
    "native_plan", "native_blocker", "parse_dockerfile", "plan_dockerfile", "buildah_dockerfile", "check_test_sh_offline",
    "build_harbor_image", "start_harbor_session", "harbor_image_digest",
]
