"""Programs that run inside sandboxes, kept as real files (linted and tested like any module) and
copied into a sandbox read-only: `grade.py` (the grader, its supervisor for Harbor tasks, and the
client behind /verifier/run-tests), `run-tests.sh` (/verifier/run-tests itself) and `test.sh` (the
Harbor verifier entry point of exports).
The host side of grading is termforge.grading.grader, termforge.grading.verifier and termforge.grading.reward_file."""

from pathlib import Path

HERE = Path(__file__).resolve().parent


def program(name: str) -> str:
    """The text of one in-sandbox program of this package."""
    return (HERE / name).read_text()
