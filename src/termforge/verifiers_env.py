"""termforge's kept corpus as a `verifiers` (v1) environment: what `termforge export --verifiers`
packages (docs/opsd.md, "Training the corpus with prime-rl"). Importable only where the
`verifiers` release the package declares is installed; the rest of termforge never imports it.

The shape follows the seed environment (tmax-opsd-v1) and verifiers' own plugin contract (a
taskset package exporting its Taskset and Harness subclasses through `__all__`):

- `CorpusTaskset` (subclassed by each exported package) yields one `TermforgeTask` per kept task
  from the package's `tasks.parquet`: task id, the taxonomy columns, verifier kind, image digest
  and the hint as `demo` (OPSD's `demo_key`). `require_demo` keeps the hinted tasks only.
  Nothing the policy must not see is in a row: tests, truth and oracle stay in the task
  directories on the host (`tasks_dir`), read only by the grader.
- `VanilluxHarness` runs termforge's harness rules (`harness.EpisodeDriver`: one persistent bash
  shell, the submit marker, head/tail observation truncation, the format-error nudge and its cap,
  the turn cap, per-command timeouts) in-process, every model call through the rollout's
  interception endpoint, every command in the task's termforge sandbox.
- The task's sandbox is termforge's runtime (bwrap, apptainer: `images.runtimes.get_runtime`) over
  the task's built image, started in the task's `setup` and graded in `finalize` by termforge's
  clean verifier (`verifier.run_verifier`) after the agent's shell is gone, exactly as `solve`
  grades. The reward `solved` is that verdict, 0 where the grader recorded an integrity finding
  (as termforge's pass@k and SFT count it); `pass_fraction`, `hacked` (the grader's integrity
  findings) and `suspicious` (commands that touch verifier paths or replay oracle lines) are
  metrics, never summed into the reward.

Why the package depends on termforge instead of vendoring code: the grader, the sandbox and the
harness rules are the security-critical parts and must be the same code that validated and
solved the corpus; a vendored copy would drift from them. The verifiers runtime the rollout
asks for is `subprocess` (the harness loop runs on the host; the agent's commands never do).
"""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:
    import verifiers.v1 as vf
except ImportError as exc:  # pragma: no cover - the env is only loaded where verifiers is installed
    from termforge.errors import TermforgeError

    raise TermforgeError(f"termforge.verifiers_env needs the verifiers package ({exc}); install the exported "
                         "environment package, which declares the verifiers release it was built for") from None
from pydantic import Field

from termforge.harness import HarnessConfig as EpisodeConfig
from termforge.harness import EpisodeDriver, Episode

__all__ = [
    "CorpusTaskset",
    "TermforgeData",
    "TermforgeTask",
    "TermforgeTaskConfig",
    "TermforgeTasksetConfig",
    "VanilluxHarness",
    "VanilluxHarnessConfig",
    "environment",
]

DATA_FILE = "tasks.parquet"
SETTINGS_FILE = "settings.json"


# ------------------------------------------------------------------------------------------------
# Config
# ------------------------------------------------------------------------------------------------

class TermforgeTaskConfig(vf.TaskConfig):
    """Where the grading material and the sandboxes are (`--env.taskset.task.*`). Unset values
    come from the package's settings.json, written at export (the paths of the machine that
    exported it)."""

    tasks_dir: Path | None = None
    """Folder of termforge task directories (<task_id>/ with tests/, private/, solution/): host
    side only, read by the grader, never shown to the policy."""
    images_dir: Path | None = None
    """Folder of the built task images (termforge's build-images output)."""
    runtime: str | None = None
    """termforge runtime backend for the sandboxes: bwrap or apptainer."""
    wall_sec: float | None = None
    cpu_sec: int | None = None
    memory_mb: int | None = None
    limits: dict[str, int] | None = None
    """Further sandbox limits (runtime.limits: max_procs, max_open_files, max_file_mb, disk_mb, tmp_mb)."""
    verifier_timeout_sec: float | None = None
    """Wall clock of the clean verifier run (default: the sandbox wall_sec, as solve grades)."""


class TermforgeTasksetConfig(vf.TasksetConfig):
    data_path: Path | None = None
    """tasks.parquet; unset: the one inside the package."""
    tasks: list[str] | None = None
    """Optional task-id subset (None: every task of the package)."""
    require_demo: bool = False
    """Keep only tasks with a hint (`demo`): set it on an OPSD entry, whose teacher needs the hint;
    leave it off for GRPO, which trains on every task."""
    task: TermforgeTaskConfig = TermforgeTaskConfig()


class VanilluxHarnessConfig(vf.HarnessConfig):
    """termforge's harness knobs (harness.HarnessConfig). Unset ones take the package's
    settings.json (the corpus's solve settings), else termforge's defaults (TMax's full scale),
    whichever entry point loaded the environment (load_environment, vf-eval, prime-rl)."""

    turn_cap: int | None = None
    max_format_errors: int | None = None
    command_timeout_sec: float | None = None
    task_timeout_sec: float | None = None
    observation_chars: int | None = None

    def episode_config(self, settings: dict) -> EpisodeConfig:
        values = {**{k: v for k, v in settings.get("harness", {}).items() if k in EPISODE_KEYS},
                  **{k: getattr(self, k) for k in EPISODE_KEYS if getattr(self, k) is not None}}
        return EpisodeConfig(**values)


EPISODE_KEYS = ("turn_cap", "max_format_errors", "command_timeout_sec", "task_timeout_sec", "observation_chars")


# ------------------------------------------------------------------------------------------------
# The package's files
# ------------------------------------------------------------------------------------------------

def package_dir(obj: Any) -> Path:
    """The folder of the exported package an object's class lives in (its tasks.parquet and
    settings.json sit beside its __init__.py)."""
    module = sys.modules[type(obj).__module__ if not isinstance(obj, type) else obj.__module__]
    return Path(module.__file__).resolve().parent


def read_settings(directory: Path) -> dict:
    path = Path(directory) / SETTINGS_FILE
    return json.loads(path.read_text()) if path.is_file() else {}


@dataclass(frozen=True)
class GradingPlace:
    """Everything a task needs on the host: its directory (tests, truth), images, runtime, limits."""

    task_dir: Path
    images_dir: Path
    runtime: str
    limits: dict
    verifier_timeout_sec: float


def grading_place(config: TermforgeTaskConfig, settings: dict, task_id: str) -> GradingPlace:
    from termforge.errors import TermforgeError

    sandbox = settings.get("sandbox", {})
    if config.tasks_dir is not None:
        from termforge.containment import check_task_id, contained

        task_dir = contained(config.tasks_dir, check_task_id(task_id, "the dataset row's task_id"))
    elif task_id in settings.get("task_dirs", {}):
        task_dir = Path(settings["task_dirs"][task_id])
    else:
        raise TermforgeError(f"task {task_id}: no task directory (set taskset.task.tasks_dir)")
    images_dir = config.images_dir or settings.get("images_dir")
    if images_dir is None:
        raise TermforgeError(f"task {task_id}: no images folder (set taskset.task.images_dir)")
    limits = {"wall_sec": sandbox.get("wall_sec", 120.0), "cpu_sec": sandbox.get("cpu_sec", 120),
              "memory_mb": sandbox.get("memory_mb", 2048), **(sandbox.get("limits") or {})}
    for key in ("wall_sec", "cpu_sec", "memory_mb"):
        if getattr(config, key) is not None:
            limits[key] = getattr(config, key)
    limits.update(config.limits or {})
    timeout = config.verifier_timeout_sec or sandbox.get("verifier_timeout_sec") or limits["wall_sec"]
    return GradingPlace(task_dir, Path(images_dir), config.runtime or sandbox.get("runtime", "bwrap"), limits,
                        float(timeout))


# ------------------------------------------------------------------------------------------------
# Sandboxes: started by the task's setup, used by the harness, graded and stopped by finalize
# ------------------------------------------------------------------------------------------------

@dataclass
class _Sandbox:
    session: Any
    place: GradingPlace
    settings: dict = field(default_factory=dict)
    shell: Any = None
    episode: Episode | None = None
    info: dict = field(default_factory=dict)


# One live sandbox per rollout, keyed by the trace id: a task object is shared by the concurrent
# rollouts of a group, so nothing per-rollout may live on it.
_SANDBOXES: dict[str, _Sandbox] = {}


def _stop(box: _Sandbox) -> None:
    if box.shell is not None:
        try:
            box.shell.close()
        except Exception:  # noqa: BLE001 - the sandbox is discarded either way
            pass
        box.shell = None
    box.session.stop()


# ------------------------------------------------------------------------------------------------
# Task data, task, taskset
# ------------------------------------------------------------------------------------------------

class TermforgeData(vf.TaskData):
    """One kept task, as the policy-facing row of the package. The answer key, tests and oracle
    are not fields at all: they stay in the task directory on the host."""

    task_id: str
    family: str = ""
    corpus_kind: str | None = None
    domain: str | None = None
    skill_type: str | None = None
    primitive_skills: list[str] = Field(default_factory=list)
    """The primitive skills the task exercises (termforge's `skills` axis; `skills` is verifiers'
    own field for skill folders to install)."""
    persona: str | None = None
    language: str | None = None
    anchor: str | None = None
    task_complexity: str | None = None
    command_complexity: str | None = None
    verifier_kind: str | None = None
    fixture_kind: str | None = None
    image_digest: str | None = None
    """The image the verdicts hold for; a sandbox over any other image is refused."""
    demo: str | None = None
    """The method-level hint (termforge's hints stage), read by OPSD through `demo_key = "demo"`."""


class TermforgeTask(vf.Task[TermforgeData, vf.State, TermforgeTaskConfig]):
    # The task's box is termforge's sandbox, which the task starts itself (setup): the verifiers
    # runtime only hosts the harness loop, so a subprocess runtime is enough.
    NEEDS_CONTAINER = False

    def __init__(self, data: TermforgeData, config: TermforgeTaskConfig | None = None,
                 settings: dict | None = None) -> None:
        super().__init__(data, config if config is not None else TermforgeTaskConfig())
        self.settings = settings or {}

    @property
    def key(self) -> str:
        return self.data.task_id  # the durable id; the content hash would move with the hint

    async def setup(self, trace: vf.Trace, runtime: vf.Runtime) -> None:
        from termforge.images.runtimes import get_runtime
        from termforge.runtime.base import Limits, task_image

        place = grading_place(self.config, self.settings, self.data.task_id)
        backend = get_runtime(place.runtime)
        image = await asyncio.to_thread(task_image, backend, place.images_dir, place.task_dir)
        if self.data.image_digest and image.digest != self.data.image_digest:
            raise vf.TaskError(f"task {self.data.task_id}: image {image.digest} is not the exported "
                               f"{self.data.image_digest}; rebuild the images or re-export")
        session = await asyncio.to_thread(backend.start, image, Limits(**place.limits))
        _SANDBOXES[trace.id] = _Sandbox(session, place, self.settings)

    async def finalize(self, trace: vf.Trace, runtime: vf.Runtime) -> None:
        """Grade as solve does: the agent's shell is gone (the harness closed it), a clean
        verifier run in the same sandbox, its verdict recorded; then the sandbox is stopped. A
        failure of the infrastructure raises (the rollout fails; it is never scored 0)."""
        from termforge.grading.verifier import run_verifier

        box = _SANDBOXES.pop(trace.id, None)
        if box is None:
            raise vf.TaskError(f"task {self.data.task_id}: no sandbox for rollout {trace.id}")
        try:
            if box.shell is not None:
                await asyncio.to_thread(box.shell.close)
                box.shell = None
            verdict = await asyncio.to_thread(run_verifier, box.session, box.place.task_dir,
                                              box.place.verifier_timeout_sec)
        finally:
            await asyncio.to_thread(_stop, box)
        trace.info["termforge"] = {
            **box.info,
            # The verifier's own output is left out: pytest quotes the tests' expected values.
            "reward": verdict.reward, "tests_ran": verdict.tests_ran, "collected": verdict.collected,
            "passed": verdict.passed, "failed": verdict.failed, "reason": verdict.reason,
            "findings": list(verdict.findings), "graded_by": verdict.graded_by, "limit_hit": verdict.limit_hit,
            "suspicious": _suspicious(box),
        }

    @vf.reward(weight=1.0)
    async def solved(self, trace: vf.Trace) -> float:
        """The clean verifier's verdict: 1 iff every recorded final-state test passed and the grader
        recorded no integrity finding (export_verifiers.rollout_reward)."""
        from termforge.export_verifiers import rollout_reward

        return rollout_reward(trace.info.get("termforge", {}))

    @vf.metric
    async def pass_fraction(self, trace: vf.Trace) -> float:
        """Passed over collected tests (logged, never summed into the reward)."""
        verdict = trace.info.get("termforge", {})
        return verdict.get("passed", 0) / verdict["collected"] if verdict.get("collected") else 0.0

    @vf.metric
    async def hacked(self, trace: vf.Trace) -> float:
        """1 when the grader recorded integrity findings (a planted reward, the grader's channel
        touched, processes left behind): evidence from the run, not string matching."""
        return float(bool(trace.info.get("termforge", {}).get("findings")))

    @vf.metric
    async def suspicious(self, trace: vf.Trace) -> float:
        """1 when a command touched verifier paths or replayed oracle lines (solve's heuristic)."""
        return float(bool(trace.info.get("termforge", {}).get("suspicious")))

    @vf.metric
    async def submitted(self, trace: vf.Trace) -> float:
        return float(trace.info.get("termforge", {}).get("end_reason") == "submitted")


def _suspicious(box: _Sandbox) -> list[str]:
    from termforge.solve import suspicious_flags

    oracle = box.place.task_dir / "solution" / "solve.sh"
    commands = box.episode.commands if box.episode is not None else []
    return suspicious_flags(commands, oracle.read_text() if oracle.is_file() else "")


class CorpusTaskset(vf.Taskset[TermforgeTask, TermforgeTasksetConfig]):
    """The kept tasks of an exported package; each package subclasses it, so the data it reads is
    the tasks.parquet beside the subclass's module."""

    def load(self):
        import pyarrow.parquet as pq

        from termforge.harness import SYSTEM_PROMPT

        directory = package_dir(self)
        settings = read_settings(directory)
        path = self.config.data_path or directory / DATA_FILE
        wanted = set(self.config.tasks) if self.config.tasks is not None else None
        fields = set(TermforgeData.model_fields)
        sandbox = settings.get("sandbox", {})
        # The grading run's own wall clock plus the sandbox's start and teardown.
        finalize = float(self.config.task.verifier_timeout_sec or self.config.task.wall_sec
                         or sandbox.get("wall_sec", 120.0)) + 120.0
        for row in pq.read_table(path).to_pylist():
            if wanted is not None and row["task_id"] not in wanted:
                continue
            if self.config.require_demo and not (row.get("demo") or "").strip():
                continue
            data = TermforgeData(
                id=row["task_id"], name=row["task_id"], description=f"termforge task ({row.get('family')})",
                prompt=row["instruction"], system_prompt=SYSTEM_PROMPT,
                timeout=vf.TaskTimeout(finalize=finalize),
                **{k: v for k, v in row.items() if k in fields and k not in ("id", "name", "description")})
            yield TermforgeTask(data, self.config.task, settings)


# ------------------------------------------------------------------------------------------------
# Harness
# ------------------------------------------------------------------------------------------------

class VanilluxHarness(vf.Harness[VanilluxHarnessConfig]):
    """termforge's vanillux harness, in-process: harness.EpisodeDriver's rules, the model through
    the rollout's interception endpoint, the commands in the task's sandbox."""

    APPENDS_SYSTEM_PROMPT = True
    NEEDS_CONTAINER = False
    # The program executes nothing in the verifiers runtime: commands go to termforge's sandbox.
    EXECUTES_CODE = False

    async def launch(self, ctx: vf.ModelContext, trace: vf.Trace, runtime: vf.Runtime, endpoint: str, secret: str,
                     mcp_urls: dict[str, str], data: vf.TaskData) -> vf.ProgramResult:
        import time

        from openai import APIError, AsyncOpenAI

        box = _SANDBOXES.get(trace.id)
        if box is None:
            raise vf.HarnessError("no termforge sandbox for this rollout: the vanillux harness runs termforge "
                                  "tasks, whose setup starts one")
        system, prompt = self.resolve_text_prompt(data)
        episode_cfg = self.config.episode_config(box.settings)
        box.shell = await asyncio.to_thread(box.session.open_shell)
        driver = EpisodeDriver(box.shell, prompt or "", episode_cfg)
        driver.messages = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": prompt or ""}]
        client = AsyncOpenAI(base_url=endpoint, api_key=secret)
        try:
            while driver.before_turn():
                t0 = time.monotonic()
                try:
                    # Sampling settings are the run's: the interception applies them.
                    completion = await client.chat.completions.create(model=ctx.model, messages=driver.messages)
                except APIError:
                    if trace.stop_condition is not None:  # a limit or @stop refused the turn
                        driver.finish("stopped")
                        break
                    raise
                usage = completion.usage
                await asyncio.to_thread(driver.apply, completion.choices[0].message.content or "",
                                        time.monotonic() - t0, usage.prompt_tokens if usage else 0,
                                        usage.completion_tokens if usage else 0)
        finally:
            await client.close()
            box.episode = driver.finish()
            # The agent's processes end with its shell, before anything grades the sandbox.
            shell, box.shell = box.shell, None
            await asyncio.to_thread(shell.close)
        episode = box.episode
        box.info = {"end_reason": episode.end_reason, "turns": len(episode.turns),
                    "format_errors": sum(t.format_error for t in episode.turns)}
        return vf.ProgramResult(exit_code=0, stdout="", stderr="")

    async def cleanup(self, trace: vf.Trace, runtime: vf.Runtime) -> None:
        """A rollout that failed before finalize still frees its sandbox."""
        box = _SANDBOXES.pop(trace.id, None)
        if box is not None:
            await asyncio.to_thread(_stop, box)


# ------------------------------------------------------------------------------------------------
# load_environment
# ------------------------------------------------------------------------------------------------

def environment(package: str, *, require_demo: bool = False, tasks: list[str] | None = None,
                task: dict | None = None, harness: dict | None = None) -> vf.Env:
    """The environment of an exported package (its `load_environment`): the package's taskset and
    the vanillux harness (the settings it was exported with, unless `task` / `harness` override
    TermforgeTaskConfig / VanilluxHarnessConfig fields), in a subprocess runtime: the harness loop
    on the host, the commands in termforge's sandboxes."""
    config = vf.SingleAgentEnvConfig(
        taskset={"id": package, "require_demo": require_demo, "tasks": tasks, "task": dict(task or {})},
        agent={"harness": {"id": package, **(harness or {})}, "runtime": {"type": "subprocess"}})
    return vf.load_environment(config)
