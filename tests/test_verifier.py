"""The clean verifier: programs the tests start cannot read the tests or the grader's memory."""

import json
from pathlib import Path

from conftest import needs_bwrap
from termforge.runtime.base import Limits
from termforge.images.runtimes import BwrapRuntime
from termforge.grading.verifier import TEST_SH, run_verifier

pytestmark = needs_bwrap

SECRET = "expected-value-7f3a9c"


def _task(tmp_path: Path) -> Path:
    d = tmp_path / "tf-peek"
    (d / "environment").mkdir(parents=True)
    (d / "environment" / "setup.sh").write_text("true\n")
    (d / "task.json").write_text(json.dumps({"id": "tf-peek"}))
    (d / "tests").mkdir()
    (d / "tests" / "test.sh").write_text(TEST_SH)
    # The final test runs the agent's program, as fuzz-equivalence tests do, and compares its output.
    (d / "tests" / "test_final_state.py").write_text(
        "import subprocess\n"
        f"EXPECTED = {SECRET!r}\n\n"
        "def test_program_output():\n"
        "    out = subprocess.run(['bash', '/app/answer.sh'], capture_output=True, text=True).stdout.strip()\n"
        "    assert out == EXPECTED\n")
    return d


def test_agent_program_cannot_read_tests_or_grader_memory(tmp_path):
    task = _task(tmp_path)
    rt = BwrapRuntime()
    image = rt.build(task, tmp_path / "images").image
    with rt.start(image, Limits(wall_sec=30)) as session:
        # A cheating 'solution': at grading time, dig the expected value out of the test file,
        # its bytecode, or the memory of the grading process.
        session.exec(r"""cat > /app/answer.sh <<'EOF'
for f in /tests/test_final_state.py /tests/__pycache__/*.pyc; do
  grep -aho 'expected-value-[0-9a-f]*' "$f" 2>/dev/null && exit 0
done
for pid in $(ls /proc | grep -E '^[0-9]+$'); do
  python3 - "$pid" <<'PY' 2>/dev/null && exit 0
import re, sys
pid = sys.argv[1]
with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb") as mem:
    for line in maps:
        lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
        try:
            mem.seek(lo); m = re.search(rb"expected-value-[0-9a-f]{6}", mem.read(hi - lo))
        except (OSError, ValueError, OverflowError):
            continue
        if m:
            print(m.group().decode()); sys.exit(0)
sys.exit(1)
PY
done
echo nothing-found
EOF""")
        verdict = run_verifier(session, task)
    assert verdict.tests_ran and verdict.collected == 1
    assert verdict.reward == 0.0, verdict.output
    assert "nothing-found" in verdict.output
