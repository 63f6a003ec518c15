"""Harbor-format exports: the current task.toml schema, a [task] name Harbor's publisher accepts,
world-readable directories, and a round trip through termforge's own Harbor loader."""

import re
import stat
import sys
import tomllib
from pathlib import Path

import pytest

from termforge.evals.harbor_tasks import load_harbor_task
from termforge.export import harbor_task_name, write_harbor_task

# harbor/constants.py ORG_NAME_PATTERN, which harbor/models/task/config.py PackageInfo.name must match
# (and must not contain ".."); harbor/publisher/publisher.py refuses a task.toml with no [task].
HARBOR_ORG_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9._-]*/[a-zA-Z0-9][a-zA-Z0-9._-]*$")
# Field names of Harbor 0.26's models (harbor/models/task/config.py): TaskConfig, PackageInfo,
# EnvironmentConfig (with BaselineNetworkPolicyConfig), AgentConfig, VerifierConfig.
TASKCONFIG_KEYS = {"schema_version", "task", "metadata", "verifier", "agent", "environment", "solution", "source",
                   "multi_step_reward_strategy", "steps", "artifacts"}
PACKAGE_KEYS = {"name", "version", "description", "authors", "keywords"}
ENVIRONMENT_KEYS = {"network_mode", "allowed_hosts", "build_timeout_sec", "docker_image", "os", "cpus", "memory_mb",
                    "storage_mb", "gpus", "gpu_types", "tpu", "mcp_servers", "env", "skills_dir", "healthcheck",
                    "workdir"}
AGENT_KEYS = {"network_mode", "allowed_hosts", "timeout_sec", "user"}
VERIFIER_KEYS = {"network_mode", "allowed_hosts", "timeout_sec", "env", "user", "environment_mode", "environment",
                 "collect"}


def _task(tmp_path: Path, task_id: str = "tf-0001.sec..x", allow_network: bool = False):
    d = tmp_path / "src" / "task"
    for sub, name, text in (("environment", "Dockerfile", "FROM debian:bookworm-slim\nWORKDIR /app\n"),
                            ("tests", "test.sh", "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n"),
                            ("solution", "solve.sh", "#!/bin/bash\ntrue\n")):
        (d / sub).mkdir(parents=True)
        (d / sub / name).write_text(text)
    (d / "solution" / "solve.sh").chmod(0o700)
    task = {"id": task_id, "family": "fam", "instruction": "Do the thing.\n",
            "signature": {"domain": "security", "skills": ["a", "b"], "task_complexity": "short"},
            "environment": {"timeout_sec": 300, "allow_network": allow_network}}
    return task, d


def test_export_writes_harbors_current_schema_and_a_publishable_name(tmp_path):
    task, d = _task(tmp_path)
    write_harbor_task(task, d, tmp_path / "out")
    out = tmp_path / "out" / task["id"]
    cfg = tomllib.loads((out / "task.toml").read_text())
    assert set(cfg) <= TASKCONFIG_KEYS and cfg["schema_version"] == "1.4"
    assert set(cfg["task"]) <= PACKAGE_KEYS and HARBOR_ORG_NAME.match(cfg["task"]["name"])
    assert ".." not in cfg["task"]["name"]
    assert set(cfg["environment"]) <= ENVIRONMENT_KEYS and cfg["environment"]["network_mode"] == "no-network"
    assert set(cfg["agent"]) <= AGENT_KEYS and set(cfg["verifier"]) <= VERIFIER_KEYS
    # Round trip: our Harbor loader reads it back with the network off and the [task] name.
    loaded = load_harbor_task(out)
    assert loaded.name == cfg["task"]["name"] and loaded.network_mode == "no-network" and not loaded.unsupported
    task2, d2 = _task(tmp_path / "b", "plain", allow_network=True)
    write_harbor_task(task2, d2, tmp_path / "out")
    assert load_harbor_task(tmp_path / "out" / "plain").network_mode == "public"
    assert harbor_task_name("..weird/..id") == "termforge/weird-.id"


def test_export_is_world_readable(tmp_path):
    task, d = _task(tmp_path)
    write_harbor_task(task, d, tmp_path / "out")
    out = tmp_path / "out" / task["id"]
    for path in [out, *out.rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode)
        want = 0o755 if path.is_dir() else 0o644
        assert mode & want == want, (path, oct(mode))
    assert stat.S_IMODE((out / "solution" / "solve.sh").stat().st_mode) == 0o755  # keeps its x bit


def test_export_parses_with_harbors_own_models_when_they_are_importable(tmp_path):
    """Loads Harbor's TaskConfig from a read-only Harbor checkout when one is there and its
    dependencies import (nothing of it is copied into termforge)."""
    ref = Path("/tmp/ref/harbor/src")
    if not ref.is_dir():
        pytest.skip("no Harbor checkout at /tmp/ref/harbor")
    sys.path.insert(0, str(ref))
    try:
        from harbor.models.task.config import TaskConfig
    except ImportError as exc:
        pytest.skip(f"Harbor's models do not import here: {exc}")
    finally:
        sys.path.remove(str(ref))
    task, d = _task(tmp_path)
    write_harbor_task(task, d, tmp_path / "out")
    cfg = TaskConfig.model_validate_toml((tmp_path / "out" / task["id"] / "task.toml").read_text())
    assert cfg.task is not None and cfg.environment.network_mode.value == "no-network"


def test_exports_record_the_image_the_task_was_validated_on(tmp_path):
    from termforge.export import IMAGE_COLUMNS, policy_row

    image = {"image_digest": "0123456789abcdef01234567", "rootfs": "image", "base": "termforge-bookworm",
             "base_names": ["termforge/base:bookworm"], "base_digest": "sha256:" + "a" * 64,
             "base_lock_digest": "sha256:" + "b" * 64}
    task, d = _task(tmp_path)
    write_harbor_task(task, d, tmp_path / "out", image=image)
    meta = tomllib.loads((tmp_path / "out" / task["id"] / "task.toml").read_text())["metadata"]
    assert (meta["image_digest"], meta["base_image"], meta["base_digest"], meta["base_lock_digest"], meta["rootfs"]) == (
        image["image_digest"], "termforge/base:bookworm", image["base_digest"], image["base_lock_digest"], "image")
    task["mismatch"] = []
    row = policy_row(task, image=image)
    assert {c: row[c] for c in IMAGE_COLUMNS} == {c: meta[c] for c in IMAGE_COLUMNS}
    # Unvalidated tasks: the columns are there, empty; task.toml says nothing it does not know.
    assert all(policy_row(task)[c] is None for c in IMAGE_COLUMNS)
    write_harbor_task(task, d, tmp_path / "bare")
    assert "image_digest" not in tomllib.loads((tmp_path / "bare" / task["id"] / "task.toml").read_text())["metadata"]
