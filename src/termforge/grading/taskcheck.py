"""The soundness core shared by family tests and the validation stage.

build -> initial-state test passes on the untouched layer -> final test fails on the untouched
layer -> the oracle makes the final test pass (through the clean verifier).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from termforge.runtime.base import Limits
from termforge.images.runtimes import BwrapRuntime
from termforge.grading.verifier import run_oracle, run_test_file, run_verifier


@dataclass
class SoundnessReport:
    task_id: str
    ok: bool
    failed_check: str = ""
    reason: str = ""
    evidence: dict = field(default_factory=dict)


def check_soundness(task_dir: Path, runtime: BwrapRuntime, images_dir: Path,
                    limits: Limits | None = None) -> SoundnessReport:
    task_dir = Path(task_dir)
    build = runtime.build(task_dir, images_dir)
    task_id = task_dir.name
    if not build.ok:
        return SoundnessReport(task_id, False, "build", build.reason, {"build_log": build.log[-4000:]})
    image = build.image
    with runtime.start(image, limits) as untouched:
        initial = run_test_file(untouched, task_dir, "test_initial_state.py")
        if initial.reward != 1.0:
            return SoundnessReport(task_id, False, "initial_state",
                                   f"initial-state test did not pass: {initial.reason}", {"verifier": initial.output})
        final_untouched = run_verifier(untouched, task_dir)
        if final_untouched.reward != 0.0 or not final_untouched.tests_ran:
            why = ("final test passes on the untouched environment" if final_untouched.tests_ran
                   else f"final test did not run: {final_untouched.reason}")
            return SoundnessReport(task_id, False, "final_fails_untouched", why, {"verifier": final_untouched.output})
    with runtime.start(image, limits) as solved:
        oracle = run_oracle(solved, task_dir)
        if not oracle.ok:
            return SoundnessReport(task_id, False, "oracle", f"solve.sh exited {oracle.exit_code}: {oracle.tail(500)}",
                                   {"oracle": oracle.tail(4000)})
        final = run_verifier(solved, task_dir)
        if final.reward != 1.0:
            return SoundnessReport(task_id, False, "oracle",
                                   f"oracle scored {final.reward}: {final.reason}", {"verifier": final.output})
    return SoundnessReport(task_id, True, reason="sound")
