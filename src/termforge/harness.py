"""The "vanillux" harness: one persistent bash tool in the task's sandbox.

The model replies with exactly one fenced bash block per turn; the observation is the command's
output (stdout and stderr interleaved) with the real exit code, truncated to 10,000 characters as
head and tail halves. A reply without exactly one block gets a format-error nudge (counted toward
a cap). The episode ends when the output contains the submit marker, at the turn cap, at the
format-error cap, or at the task's wall-clock limit. The policy sees the instruction and what
its own commands print, nothing else: no tests, no solution, no truth, no hint.
"""

from __future__ import annotations

import re
import time
from dataclasses import asdict, dataclass, field

from termforge.models.base import ChatModel, SamplingParams

SUBMIT_MARKER = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
FENCE_RE = re.compile(r"```(?:bash|sh|shell|console)?[ \t]*\n(.*?)```", re.DOTALL)

SYSTEM_PROMPT = f"""You are an expert Linux engineer working in a terminal to complete a task.

The environment:
- A bash shell running as an unprivileged user (uid 1000) in /app, the task's working directory.
- /app is writable; /usr and /etc are read-only; there is no network access and no sudo.
- The shell is persistent: the directory and variables you set carry over between commands.
- Commands read no standard input; a command that runs past the time limit is killed.

How to act:
- Reply with exactly one fenced code block per turn, like:
```bash
ls -la /app
```
- You will see the command's output and exit code, then decide on the next command.
- When the task is complete, reply with:
```bash
echo {SUBMIT_MARKER}
```
"""

FORMAT_NUDGE = ("Your reply must contain exactly one fenced ```bash code block with the next command "
                f"(or `echo {SUBMIT_MARKER}` when you are done). Found {{found}} blocks.")


@dataclass
class HarnessConfig:
    turn_cap: int = 64
    max_format_errors: int = 5
    command_timeout_sec: float = 60.0
    task_timeout_sec: float = 1800.0
    observation_chars: int = 10_000
    sampling: SamplingParams = field(default_factory=SamplingParams)
    # What task_timeout_sec counts. wall: everything since the episode started (solve: the model's
    # replies are part of the agent's time). commands: only the episode's own commands (training:
    # replies come from one batched generate shared by every live episode, whose duration depends
    # on the batch and the machine's load, not on what this policy did).
    task_clock: str = "wall"


@dataclass
class Turn:
    index: int
    reply: str
    command: str | None
    observation: str
    exit_code: int | None
    timed_out: bool
    format_error: bool
    model_seconds: float
    exec_seconds: float
    prompt_tokens: int
    completion_tokens: int
    # The sandbox limit that ended the command (disk_mb over all of /app, home, /tmp, /dev/shm...).
    limit_hit: str | None = None


@dataclass
class Episode:
    messages: list[dict]
    turns: list[Turn]
    end_reason: str  # submitted | turn_cap | format_errors | task_timeout
    model_seconds: float = 0.0
    exec_seconds: float = 0.0
    wall_seconds: float = 0.0

    @property
    def prompt_tokens(self) -> int:
        return sum(t.prompt_tokens for t in self.turns)

    @property
    def completion_tokens(self) -> int:
        return sum(t.completion_tokens for t in self.turns)

    @property
    def commands(self) -> list[str]:
        return [t.command for t in self.turns if t.command]

    def to_dict(self) -> dict:
        return {"messages": self.messages, "turns": [asdict(t) for t in self.turns], "end_reason": self.end_reason,
                "model_seconds": round(self.model_seconds, 4), "exec_seconds": round(self.exec_seconds, 4),
                "wall_seconds": round(self.wall_seconds, 4), "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens}


def extract_commands(reply: str) -> list[str]:
    """The fenced command blocks of a reply (bash/sh/shell or unlabelled)."""
    return [m.strip("\n") for m in FENCE_RE.findall(reply) if m.strip()]


def truncate_observation(text: str, limit: int = 10_000) -> str:
    """Keep the head and tail halves of a long output, saying how much was cut."""
    if len(text) <= limit:
        return text
    half = limit // 2
    cut = len(text) - 2 * half
    return f"{text[:half]}\n[... {cut} characters truncated ...]\n{text[-half:]}"


def format_observation(output: str, exit_code: int, timed_out: bool, limit: int, timeout: float) -> str:
    body = truncate_observation(output, limit)
    if timed_out:
        return (f"{body}\n[command timed out after {timeout:g}s and was killed; the shell was restarted in /app, "
                "so variables and the directory were reset]")
    return f"{body}\n[exit code: {exit_code}]"


def initial_messages(instruction: str) -> list[dict]:
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": instruction}]


class EpisodeDriver:
    """The harness's rules for one episode, one reply at a time.

    `run_episode` drives it with a chat model; the trainer's terminal rollouts drive many at once
    (one batched generate call for every live episode per turn), so both follow exactly the same
    rules: format nudges and their cap, the per-command timeout within the task's wall-clock
    limit, observation truncation, the submit marker and the turn cap.
    """

    def __init__(self, shell, instruction: str, cfg: HarnessConfig):
        self.shell = shell
        self.cfg = cfg
        self.messages = initial_messages(instruction)
        self.turns: list[Turn] = []
        self.format_errors = 0
        self.start = time.monotonic()
        self.end_reason: str | None = None
        self.model_total = self.exec_total = 0.0

    @property
    def done(self) -> bool:
        return self.end_reason is not None

    def before_turn(self) -> bool:
        """Whether the episode may take another turn (sets end_reason when it may not)."""
        if self.done:
            return False
        if len(self.turns) >= self.cfg.turn_cap:
            self.end_reason = "turn_cap"
        elif self._task_elapsed() > self.cfg.task_timeout_sec:
            self.end_reason = "task_timeout"
        return not self.done

    def _task_elapsed(self) -> float:
        if self.cfg.task_clock == "commands":
            return self.exec_total
        return time.monotonic() - self.start

    def apply(self, reply: str, model_s: float = 0.0, prompt_tokens: int = 0, completion_tokens: int = 0) -> str:
        """Record the model's reply, run its command; returns the next user message's text."""
        index = len(self.turns)
        self.model_total += model_s
        self.messages.append({"role": "assistant", "content": reply})
        blocks = extract_commands(reply)
        if len(blocks) != 1:
            self.format_errors += 1
            nudge = FORMAT_NUDGE.format(found=len(blocks))
            self.messages.append({"role": "user", "content": nudge})
            self.turns.append(Turn(index, reply, None, nudge, None, False, True, model_s, 0.0,
                                   prompt_tokens, completion_tokens))
            if self.format_errors >= self.cfg.max_format_errors:
                self.end_reason = "format_errors"
            return nudge
        command = blocks[0]
        left = self.cfg.task_timeout_sec - self._task_elapsed()
        timeout = max(1.0, min(self.cfg.command_timeout_sec, left))
        t1 = time.monotonic()
        res = self.shell.run(command, timeout=timeout)
        exec_s = time.monotonic() - t1
        self.exec_total += exec_s
        observation = format_observation(res.stdout, res.exit_code, res.timed_out, self.cfg.observation_chars,
                                         timeout)
        self.messages.append({"role": "user", "content": observation})
        self.turns.append(Turn(index, reply, command, observation, res.exit_code, res.timed_out, False, model_s,
                               exec_s, prompt_tokens, completion_tokens, res.limit_hit))
        if SUBMIT_MARKER in res.stdout:
            self.end_reason = "submitted"
        return observation

    def finish(self, end_reason: str | None = None) -> Episode:
        if end_reason is not None and not self.done:
            self.end_reason = end_reason
        return Episode(self.messages, self.turns, self.end_reason or "turn_cap", self.model_total,
                       self.exec_total, time.monotonic() - self.start)


def run_episode(model: ChatModel, shell, instruction: str, cfg: HarnessConfig,
                sampling: SamplingParams | None = None) -> Episode:
    """Drive one episode: the model's commands run in `shell` (a PersistentShell) until it submits."""
    driver = EpisodeDriver(shell, instruction, cfg)
    sampling = sampling or cfg.sampling
    while driver.before_turn():
        t0 = time.monotonic()
        completion = model.chat(driver.messages, n=1, sampling=sampling)[0]
        driver.apply(completion.text, time.monotonic() - t0, completion.prompt_tokens, completion.completion_tokens)
    return driver.finish()
