"""Apptainer runtime: tested up to the command lines it runs (apptainer is not installable on the
CI machines), and for real wherever `apptainer` is on PATH."""

import shutil

import pytest

from conftest import make_signature
from termforge.generate.families import all_families
from termforge.generate.procedural import generate_task
from termforge.images.runtimes import ApptainerRuntime
from termforge.runtime.apptainer import dockerfile_to_def, layer_on_base
from termforge.runtime.base import Bind, Limits
from termforge.grading.verifier import run_verifier


@pytest.fixture
def task_dir(tmp_path):
    fam = all_families()[0]
    sig = make_signature(0, fam.domains[0], fam.verifier_kinds[0], fam.fixture_kinds[0])
    return generate_task(sig, tmp_path / "tasks", families=[fam])


def test_build_commands_are_fakeroot_and_layered_on_the_tasks_base_image(task_dir, tmp_path):
    """The base SIF is built from the image store's OCI layout: the very base image (by digest)
    the bwrap runtime runs the task on."""
    from termforge.images import ensure_task_base
    from termforge.images.store import ImageStore
    from termforge.io import read_json

    store = ImageStore(tmp_path / "store")
    rt = ApptainerRuntime(dry_run=True, store=store)
    res = rt.build(task_dir, tmp_path / "images")
    assert res.ok, res.reason
    base_cmd, task_cmd = rt.commands
    assert base_cmd[:4] == ["apptainer", "build", "--fakeroot", "--force"]
    assert base_cmd[-1] == f"oci://{store.root}:termforge/base:bookworm"
    base = ensure_task_base("termforge/base:bookworm")
    assert store.get("termforge/base:bookworm").layers[0]["digest"] == base.digest
    assert read_json(tmp_path / "images" / task_dir.name / "image.json")["base"]["digest"] == base.digest
    definition = (tmp_path / "images" / task_dir.name / "task.def").read_text()
    assert definition.startswith("Bootstrap: localimage\nFrom: ")
    assert "bases/" in definition.splitlines()[1]
    assert "%post" in definition and "setup.sh" in definition
    # Content addressing: an unchanged task is not rebuilt.
    again = rt.build(task_dir, tmp_path / "images")
    assert again.cached and len(rt.commands) == 2


def test_exec_is_contained_without_network_with_an_overlay(task_dir, tmp_path):
    rt = ApptainerRuntime(dry_run=True)
    image = rt.build(task_dir, tmp_path / "images").image
    with rt.start(image, Limits()) as session:
        session.exec("ls /app", binds=[Bind(tmp_path, "/tests")], env={"A": "1"})
    overlay_cmd, exec_cmd = rt.commands[-2:]
    assert overlay_cmd[:3] == ["apptainer", "overlay", "create"]
    for flag in ("--containall", "--no-home", "--cleanenv", "--overlay"):
        assert flag in exec_cmd
    assert exec_cmd[exec_cmd.index("--network") + 1] == "none"
    assert f"{tmp_path}:/tests:ro" in exec_cmd
    assert exec_cmd[-3:] == ["--norc", "-c", "ls /app"]


def test_network_only_when_declared(task_dir, tmp_path):
    rt = ApptainerRuntime(dry_run=True)
    image = rt.build(task_dir, tmp_path / "images").image
    image.allow_network = True
    assert "--network" not in rt.exec_argv(image, None, "true")


def test_dockerfile_converts_through_spython(task_dir):
    definition = dockerfile_to_def(task_dir / "environment" / "Dockerfile")
    assert definition.startswith("Bootstrap: docker")
    assert definition.count("bash /tmp/env/setup.sh") == 1  # parsed once, not duplicated
    layered = layer_on_base(definition, "/x/base.sif")
    assert layered.splitlines()[:2] == ["Bootstrap: localimage", "From: /x/base.sif"]


@pytest.mark.skipif(shutil.which("apptainer") is None, reason="apptainer is not installed on this machine")
def test_real_apptainer_build_and_oracle(task_dir, tmp_path):
    rt = ApptainerRuntime()
    res = rt.build(task_dir, tmp_path / "images")
    assert res.ok, res.reason
    with rt.start(res.image) as session:
        assert session.exec("bash /solution/solve.sh", binds=[Bind(task_dir / "solution", "/solution")]).ok
        assert run_verifier(session, task_dir).reward == 1.0
