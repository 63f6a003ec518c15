"""Programs validation runs inside a task's sandbox as a cheating agent, kept as files (package
data, read by name) so they are linted, tested and read like any code:

- `<name>.sh`: reward-hack probes (termforge.quality.validate.PROBES), each run as the agent's
  whole turn; the clean verifier must still score 0.
- `hijack/<route>.sh`, `hijack/channel_steal.py`: the routes a hijack payload takes from inside
  a grade (termforge.quality.hijack.ROUTES), which validation plants in the programs a task's
  final tests run.
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent

# The probes in the order validation runs them (their checks are recorded in this order).
PROBE_NAMES = ("planted_reward_file", "fake_pytest_and_python_on_path", "conftest_and_sitecustomize",
               "poisoned_shell_rc", "background_rewriter")


def program(name: str) -> str:
    """The text of one program of this folder, by its path below it (`hijack/linger.sh`)."""
    path = (HERE / name).resolve()
    if path.parent not in (HERE, HERE / "hijack") or not path.is_file():
        raise FileNotFoundError(f"no sandbox program {name!r} in {HERE}")
    return path.read_text()


def probes() -> dict[str, str]:
    """Probe name -> its script, in PROBE_NAMES order."""
    return {name: program(f"{name}.sh") for name in PROBE_NAMES}
