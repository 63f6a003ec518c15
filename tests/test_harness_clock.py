"""harness.EpisodeDriver's task clock: a training episode's time limit counts its own commands,
never the batched generation it waits on (docs/opsd.md, "Training on a shared machine")."""

from __future__ import annotations

from types import SimpleNamespace

import termforge.harness as harness
from termforge.harness import EpisodeDriver, HarnessConfig


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


class SlowShell:
    """Each command takes 2 s of the clock; records the timeout it was given."""

    def __init__(self, clock):
        self.clock, self.timeouts = clock, []

    def run(self, command, timeout):
        self.timeouts.append(timeout)
        self.clock.now += 2.0
        return SimpleNamespace(stdout="ok\n", exit_code=0, timed_out=False, limit_hit=None)


def _episode(monkeypatch, task_clock):
    clock = Clock()
    monkeypatch.setattr(harness.time, "monotonic", clock)
    shell = SlowShell(clock)
    driver = EpisodeDriver(shell, "do it", HarnessConfig(turn_cap=5, task_timeout_sec=100.0, command_timeout_sec=30.0,
                                                         task_clock=task_clock))
    while driver.before_turn():
        clock.now += 60.0  # the shared batched generate, slow on a loaded machine
        driver.apply("```bash\nls\n```", model_s=60.0)
    return driver.finish(), shell


def test_training_clock_counts_commands_only(monkeypatch):
    episode, shell = _episode(monkeypatch, "commands")
    assert episode.end_reason == "turn_cap" and len(episode.turns) == 5
    assert shell.timeouts == [30.0] * 5  # 2 s used per turn: far from the 100 s limit


def test_solve_clock_counts_the_whole_wall_time(monkeypatch):
    episode, shell = _episode(monkeypatch, "wall")
    assert episode.end_reason == "task_timeout" and len(episode.turns) == 2
    assert shell.timeouts == [30.0, 1.0]  # the second command got what was left of the wall clock (floor 1 s)
