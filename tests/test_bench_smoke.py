"""Every benchmark script runs with its smallest options and leaves nothing behind in the
temporary directory (TMPDIR points each run at a fresh, otherwise empty one). The numbers are the
benchmarks' business; this only keeps the scripts working as the code under them changes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import gate_slice

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"

# bench script -> its smallest run. make_hint_corpus.py is not a benchmark: it rewrites committed data.
SMOKE = {
    # (the grade matrix, the sandbox attacks and one build escape of the eight)
    "bench_attacks.py": ["--families", "log_level_filter", "--attacks", "forged_proof_line", "--escapes", "proc1_root"],
    "bench_compose.py": ["--families", "log_level_filter", "--fixtures", "image"],
    "bench_dockerfile_builds.py": ["--baseline-src", "src", "--rounds", "1"],
    "bench_decontam.py": ["--tasks", "200", "--refs", "5", "--plants", "1", "--repeat", "1", "--shard-size", "100"],
    "bench_generate.py": ["--tasks", "3", "--reps", "2"],
    "bench_harness.py": ["--tasks", "1", "--delay", "0.05", "--concurrency", "1,2"],
    "bench_honour.py": ["--n", "20", "--behavioural", "1", "--anchor-behavioural", "1"],
    "bench_hint_gate.py": ["--split", "heldout"],
    "bench_images.py": ["--tasks", "1", "--starts", "2"],
    "bench_input_checks.py": ["--tasks", "20", "--k", "2", "--repeat", "1"],
    "bench_input_sensitivity.py": ["--families", "log_level_filter"],
    "bench_mutation.py": ["--families", "log_level_filter", "--seeds", "1"],
    "bench_opsd_loss.py": ["--batch", "1", "--tokens", "8", "--vocab", "64", "--chunk-size", "4"],
    "bench_opsd_step.py": ["--tiny", "--steps", "1", "--warmup", "0", "--prompts", "2", "--max-completion", "4",
                           "--prompt-min", "4", "--prompt-max", "8", "--context-min", "4", "--context-max", "8",
                           "--micro-batch", "2"],
    "bench_plan.py": ["--skip-baseline"],
    "bench_scale.py": ["--tasks", "4", "--shard-size", "2"],
    "bench_shared_node.py": ["--tiny", "--settings", "one", "--burners", "1"],
    "bench_tb2_native_share.py": ["tests/data/tb2_format", "--baseline-src", "src"],
    "bench_terminal_cpu.py": ["--tasks", "1", "--episodes", "1", "--batch", "1", "--max-new-tokens", "4",
                              "--turn-cap", "1"],
    "bench_terminal_learning.py": ["--quick", "--threads", "1"],
    "bench_terminal_step.py": ["--tiny", "--prompts", "2", "--max-new-tokens", "4", "--micro-batch", "2",
                               "--steps", "1"],
    "bench_validate.py": ["--families", "log_level_filter", "--tasks", "1", "--mutants", "1"],
}
NEEDS_SANDBOX = {"bench_attacks.py", "bench_compose.py", "bench_generate.py", "bench_harness.py", "bench_honour.py",
                 "bench_images.py", "bench_input_sensitivity.py", "bench_mutation.py", "bench_scale.py",
                 "bench_terminal_cpu.py", "bench_terminal_learning.py", "bench_validate.py",
                 "bench_dockerfile_builds.py"}
# Benches that build a Dockerfile (buildah, the RUN step in bwrap).
NEEDS_BUILDAH = {"bench_attacks.py", "bench_dockerfile_builds.py"}
# Modules of bench/ the scripts import, not benchmarks of their own.
HELPERS = {"bench_args.py"}


def test_every_bench_script_has_a_smoke_run():
    scripts = {p.name for p in BENCH.glob("bench_*.py")} - HELPERS
    assert scripts == set(SMOKE), f"give these a smoke run in SMOKE: {sorted(scripts ^ set(SMOKE))}"


# Benches whose smallest run a test of their own makes and checks (one run of it in the suite, not two).
DEDICATED = {"bench_terminal_learning.py": "tests/test_bench_learning.py"}


# Smoke runs past ten seconds (a model, a corpus, an image build to set up) run in make test-all;
# what they measure is tested in the gate by the tests of the code they drive.
SLOW_SMOKE = {"bench_hint_gate.py", "bench_scale.py", "bench_images.py", "bench_opsd_step.py", "bench_terminal_step.py",
              "bench_terminal_cpu.py", "bench_opsd_loss.py", "bench_dockerfile_builds.py", "bench_shared_node.py"}


@pytest.mark.slow
@pytest.mark.parametrize("script", gate_slice(sorted(set(SMOKE) - set(DEDICATED)),
                                               set(SMOKE) - set(DEDICATED) - SLOW_SMOKE))
def test_bench_runs_and_cleans_up(script, tmp_path):
    if script in NEEDS_SANDBOX and shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    if script in NEEDS_BUILDAH and shutil.which("buildah") is None:
        pytest.skip("buildah is not installed")
    # A fresh temporary directory the sandboxes' own user can reach, as /tmp is (pytest's are private).
    tmp = Path(tempfile.mkdtemp(prefix="bench-smoke-", dir="/tmp"))
    tmp.chmod(0o1777)
    # torch.compile keeps its kernel cache in the temporary directory on purpose (it is reused by
    # later runs): point it elsewhere, so that only what a bench forgot remains in TMPDIR.
    env = {**os.environ, "TMPDIR": str(tmp), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT / "src"),
           "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    try:
        res = subprocess.run([sys.executable, str(BENCH / script), *SMOKE[script]], cwd=ROOT, capture_output=True,
                             text=True, env=env, timeout=900)
        left = sorted(str(p.relative_to(tmp)) for p in tmp.iterdir())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    assert res.returncode == 0, f"{script} {' '.join(SMOKE[script])}:\n{res.stdout[-2000:]}\n{res.stderr[-3000:]}"
    assert res.stdout.strip(), f"{script} printed nothing"
    assert left == [], f"{script} left temporary files behind: {left[:10]}"


@pytest.mark.slow
def test_bench_validate_remeasures_a_baseline_commit_in_the_same_run(tmp_path):
    # --baseline REV validates the same sample with REV's own src/ (here HEAD's, so the verdicts must
    # agree) through bench/validate_at_commit.py, and prints its rate and each path's ratio to it.
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    tmp = Path(tempfile.mkdtemp(prefix="bench-smoke-", dir="/tmp"))
    tmp.chmod(0o1777)
    env = {**os.environ, "TMPDIR": str(tmp), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT / "src")}
    try:
        res = subprocess.run([sys.executable, str(BENCH / "bench_validate.py"), "--baseline", "HEAD", "--families",
                              "log_level_filter", "--tasks", "1", "--mutants", "1", "--paths", "new"],
                             cwd=ROOT, capture_output=True, text=True, env=env, timeout=900)
        left = sorted(str(p.relative_to(tmp)) for p in tmp.iterdir())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    assert res.returncode == 0, f"{res.stdout[-2000:]}\n{res.stderr[-3000:]}"
    rates = {line.split()[0]: line for line in res.stdout.splitlines() if "per core-hour held" in line}
    assert set(rates) == {"baseline", "new"} and "x baseline held" in rates["new"], res.stdout[-1500:]
    assert "[1/1] baseline tf-" in res.stdout
    assert "verdicts and reasons identical on 1/1 tasks between baseline HEAD and new" in res.stdout
    assert left == [], f"bench_validate --baseline left temporary files behind: {left[:10]}"
