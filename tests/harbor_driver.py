"""Harbor's own verifier (harbor/verifier/verifier.py, `Verifier.verify`) run against a termforge
bwrap sandbox, for tests/test_attacks.py: run with the Python of a venv where the `harbor` wheel
is installed (it needs Python 3.12), never imported by termforge.

    python harbor_driver.py SPEC.json

SPEC: {"task_dir": exported Harbor task, "trial_dir": where Harbor writes the trial,
"argv": the bwrap command line up to and including "--" (the command is appended),
"mounts": {"/tests": host dir, "/logs": host dir}}. Prints one JSON line: {"rewards": ...} or
{"error": exception type, "message": ...}.

The environment behaves as Harbor's docker environment does for the verifier: exec runs a
command in the sandbox (here: a fresh bwrap sandbox over the same task layer), upload_dir copies
into the container's /tests, download_dir copies /logs/verifier back to the trial directory
(symlinks as symlinks, like `docker cp`); everything else — removing stale rewards, uploading the
tests, running test.sh through build_execution_command, choosing reward.json over reward.txt,
parsing — is Harbor's code.
"""

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path

from harbor.environments.base import BaseEnvironment, ExecResult
from harbor.models.task.task import Task
from harbor.models.trial.paths import TrialPaths
from harbor.verifier.verifier import Verifier


def _host(spec: dict, path: str) -> Path:
    for target, source in spec["mounts"].items():
        if path == target or path.startswith(target.rstrip("/") + "/"):
            return Path(source) / path[len(target):].lstrip("/")
    raise ValueError(f"{path} is not backed by a host directory in this sandbox")


def make_environment(spec: dict):
    class BwrapEnvironment(BaseEnvironment):
        @staticmethod
        def type() -> str:
            return "termforge-bwrap"

        def _validate_definition(self):
            pass

        async def start(self, force_build: bool) -> None:
            pass

        async def stop(self, delete: bool):
            pass

        async def upload_file(self, source_path, target_path: str):
            dest = _host(spec, target_path)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source_path, dest)

        async def upload_dir(self, source_dir, target_dir: str):
            shutil.copytree(source_dir, _host(spec, target_dir), symlinks=True, dirs_exist_ok=True)

        async def download_file(self, source_path: str, target_path):
            shutil.copy2(_host(spec, source_path), target_path, follow_symlinks=False)

        async def download_dir(self, source_dir: str, target_dir):
            shutil.copytree(_host(spec, source_dir), target_dir, symlinks=True, dirs_exist_ok=True)

        async def exec(self, command, cwd=None, env=None, timeout_sec=None, user=None) -> ExecResult:
            exports = "".join(f"export {k}={json.dumps(v)}; " for k, v in (env or {}).items())
            where = f"cd {json.dumps(cwd)} && " if cwd else ""
            res = subprocess.run([*spec["argv"], "/bin/bash", "-c", exports + where + command],
                                 capture_output=True, text=True, timeout=timeout_sec or 300)
            return ExecResult(stdout=res.stdout, stderr=res.stderr, return_code=res.returncode)

    return BwrapEnvironment


def main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    task = Task(spec["task_dir"])
    trial_paths = TrialPaths(Path(spec["trial_dir"]))
    trial_paths.mkdir()
    env = make_environment(spec)(environment_dir=task.paths.environment_dir, environment_name="t",
                                 session_id="t__harbor__env", trial_paths=trial_paths,
                                 task_env_config=task.config.environment)
    try:
        result = asyncio.run(Verifier(task=task, trial_paths=trial_paths, environment=env).verify())
    except Exception as exc:  # noqa: BLE001 - reported to the test
        print(json.dumps({"error": type(exc).__name__, "message": str(exc)[:500]}))
        return
    print(json.dumps({"rewards": result.rewards}))


if __name__ == "__main__":
    main(sys.argv[1])
