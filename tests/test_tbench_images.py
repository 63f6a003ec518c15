"""Terminal-Bench tasks on images by reference: `termforge images pull` from a real registry (a
local one on 127.0.0.1), the native runner pulling a FROM it lacks when eval.tbench.pull_images
allows, and the FROM image's own configuration (Env with its PATH, WorkingDir) honoured in the
agent's shell and the verifier, as Docker (and so Harbor) gives it."""

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from conftest import needs_bwrap
from local_registry import forget_images_from, local_registry, needs_registry, push
from termforge.errors import TermforgeError
from termforge.evals.harbor_tasks import NativeOptions, build_harbor_image, load_harbor_task
from termforge.evals.tbench import noop_agent, oracle_agent, run_native
from termforge.images import ensure_base
from termforge.images.store import ImageStore, register_base

ROOT = Path(__file__).resolve().parents[1]
TOOL_ANSWER = "tf-tool-answer-7"
TOOL_PATH = "/opt/tftool/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _tool_layer(path: Path) -> Path:
    """A layer holding a tool in a directory only the image's own PATH names."""
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for d in ("opt", "opt/tftool", "opt/tftool/bin"):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for name, body in (("tf-tool", f"#!/bin/sh\necho {TOOL_ANSWER}\n"),
                           # An entrypoint as images have them: set the container up, then exec the command.
                           ("tf-entry", "#!/bin/sh\necho \"$TFTOOL_HOME\" > /app/entry-ran\nexec \"$@\"\n")):
            info = tarfile.TarInfo(f"opt/tftool/bin/{name}")
            info.size, info.mode = len(body.encode()), 0o755
            tar.addfile(info, io.BytesIO(body.encode()))
    return path


def _tool_image(store: ImageStore, tmp: Path, name: str):
    """debian:bookworm-slim (the declared base) plus the tool, with Env PATH naming the tool's
    directory and WorkingDir /opt/tftool, as a golang or rust image sets its own."""
    base = register_base(ensure_base("debian-bookworm-slim"), store)[0]
    return store.add_layers(name, [(_tool_layer(tmp / "tool.tar"), None)], base=base,
                            env=[f"PATH={TOOL_PATH}", "TFTOOL_HOME=/opt/tftool"], workdir="/opt/tftool",
                            carried={"Entrypoint": ["/opt/tftool/bin/tf-entry"]}, history=["tool on the image's PATH"])


def _tool_task(root: Path, from_ref: str) -> Path:
    """A Harbor task whose oracle and test.sh need the tool by name: only the image's PATH finds it.
    Its Dockerfile sets no WORKDIR and no ENV, so both come from the FROM image alone."""
    d = root / "tool-on-image-path"
    for sub in ("environment", "tests", "solution"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    (d / "instruction.md").write_text("Write the output of tf-tool into /app/answer.txt.\n")
    (d / "task.toml").write_text('version = "1.0"\n[environment]\nnetwork_mode = "no-network"\n')
    (d / "environment" / "Dockerfile").write_text(f"FROM {from_ref}\n")
    (d / "solution" / "solve.sh").write_text("#!/bin/bash\ntf-tool > /app/answer.txt\npwd > /app/where.txt\n"
                                             "echo \"$TFTOOL_HOME\" >> /app/where.txt\n")
    (d / "tests" / "test.sh").write_text(
        "#!/bin/bash\n"
        f"if [ \"$(cat /app/answer.txt 2>/dev/null)\" = {TOOL_ANSWER} ] && [ \"$(tf-tool)\" = {TOOL_ANSWER} ] \\\n"
        "   && [ \"$(cat /app/where.txt 2>/dev/null)\" = \"$(printf '/opt/tftool\\n/opt/tftool')\" ] \\\n"
        "   && [ \"$PWD\" = /opt/tftool ] && [ \"$(cat /app/entry-ran)\" = /opt/tftool ]; then\n"
        "  echo 1 > /logs/verifier/reward.txt\nelse\n  echo 0 > /logs/verifier/reward.txt\nfi\n")
    return d


@pytest.fixture
def private_store(tmp_path, monkeypatch):
    store = ImageStore(tmp_path / "store")
    monkeypatch.setenv("TERMFORGE_IMAGE_STORE", str(store.root))
    return store


def _controls(task_dir: Path, images: Path, out: Path, options: NativeOptions) -> dict:
    task = load_harbor_task(task_dir)
    return {name: {t.task_name: t.reward for t in run_native([task], agent, 1, images, out / name,
                                                                  options=options).trials}
            for name, agent in (("oracle", oracle_agent), ("noop", noop_agent))}


@needs_bwrap
@needs_registry
def test_a_from_image_is_pulled_by_reference_and_its_path_and_workdir_are_honoured(tmp_path, private_store, request):
    """Harbor (Docker) runs solve.sh and test.sh with the image's Env and WorkingDir
    (harbor/environments/docker/docker.py exec: `docker exec` into the built container, whose
    config keeps the FROM image's): oracle 1, no-op 0. The image reaches the store only from the
    registry, by tag and by digest; with pulling off, the task is an environment error naming the
    commands that add the image."""
    source = ImageStore(tmp_path / "source-store")
    _tool_image(source, tmp_path, "tf/tooly:1")
    with local_registry(tmp_path / "registry") as registry:
        request.addfinalizer(lambda: forget_images_from(registry))
        ref = f"{registry}/tf/tooly:1"
        digest = push(f"oci:{source.root}:tf/tooly:1", ref)
        task_dir = _tool_task(tmp_path / "tasks", ref)
        task = load_harbor_task(task_dir)

        off = build_harbor_image(task, tmp_path / "images", options=NativeOptions(pull_images=False))
        assert not off.ok
        assert f"base image {ref} is not in termforge's image store" in off.reason
        assert "termforge images add" in off.reason and f"termforge images pull docker://{ref}" in off.reason
        assert private_store.get(ref) is None

        scores = _controls(task_dir, tmp_path / "images", tmp_path / "jobs", NativeOptions(pull_images=True))
        assert scores == {"oracle": {task.name: 1.0}, "noop": {task.name: 0.0}}
        pulled = private_store.get(ref)
        assert pulled is not None and pulled.config["config"]["WorkingDir"] == "/opt/tftool"

        # By digest, with the CLI: the store keeps it under the digest reference, which a FROM names.
        by_digest = f"{registry}/tf/tooly@{digest}"
        cli = subprocess.run([sys.executable, "-m", "termforge.cli", "images", "pull", f"docker://{by_digest}"],
                             capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
                             timeout=300)
        assert cli.returncode == 0, cli.stderr
        assert f"images pull: {by_digest}" in cli.stdout
        assert private_store.get(by_digest).digest == digest
    # The registry is gone: the digest-pinned task builds from the store alone, and runs.
    digest_task = _tool_task(tmp_path / "digest-tasks", by_digest)
    scores = _controls(digest_task, tmp_path / "images", tmp_path / "digest-jobs", NativeOptions(pull_images=False))
    assert scores == {"oracle": {"tool-on-image-path": 1.0}, "noop": {"tool-on-image-path": 0.0}}
    # An entrypoint that fails as the container starts: an environment error naming it, not a score.
    broken = _tool_task(tmp_path / "broken-entry", by_digest)
    (broken / "environment" / "Dockerfile").write_text(
        f'FROM {by_digest}\nENTRYPOINT ["/bin/sh", "-c", "echo tf-entry-broke >&2; exit 7", "--"]\n')
    (trial,) = run_native([load_harbor_task(broken)], oracle_agent, 1, tmp_path / "images",
                          tmp_path / "broken-jobs").trials
    assert trial.reward is None and trial.error_kind == "environment"
    assert "the image's Entrypoint" in trial.exception_message and "exited 7" in trial.exception_message
    assert "tf-entry-broke" in trial.exception_message


def test_an_added_name_never_silently_shadows_a_declared_base(tmp_path, private_store):
    """`FROM debian:bookworm-slim` builds on the declared base; an image added or pulled under
    that name would be overwritten by the base's registration, so it is refused in one line that
    says the declared base wins."""
    tarball = tmp_path / "root.tar"
    with tarfile.open(tarball, "w") as tar:
        info = tarfile.TarInfo("etc")
        info.type = tarfile.DIRTYPE
        tar.addfile(info)
    other = ImageStore(tmp_path / "other")
    other.add("localhost/not-the-base:1", tarball)
    archive = other.save("localhost/not-the-base:1", tmp_path / "not-the-base.oci.tar")
    for call in (lambda: private_store.add("docker.io/library/debian:bookworm-slim", tarball),
                 lambda: private_store.add("debian:bookworm-slim", archive),
                 lambda: private_store.pull("docker://debian:bookworm-slim")):
        with pytest.raises(TermforgeError) as err:
            call()
        message = str(err.value)
        assert "\n" not in message
        assert "debian:bookworm-slim is the name of the declared base debian-bookworm-slim" in message
        assert "the declared base wins" in message
    assert private_store.images() == []
    # Any other name goes in.
    assert private_store.add("localhost/debian:bookworm-slim", tarball).name == "localhost/debian:bookworm-slim"


@pytest.mark.parametrize("ref, loopback", [
    ("127.0.0.1:5000/a/b:1", True), ("localhost:5000/x", True), ("[::1]:5000/x:1", True), ("127.9.9.9/x", True),
    ("ubuntu:24.04", False), ("ghcr.io/astral-sh/uv:0.8.15", False), ("10.0.0.1:5000/x", False),
    ("127.0.0.1.nip.io/x", False), ("localhost.example.com/x", False),
])
def test_tls_verification_is_off_only_for_loopback_registries(ref, loopback):
    from termforge.images.store import is_loopback_registry

    assert is_loopback_registry(ref) is loopback


def test_pull_takes_registry_references_only(private_store):
    for bad in ("oci-archive:/tmp/x.tar", "docker-archive:/tmp/x.tar", "/tmp/x", ""):
        with pytest.raises(TermforgeError, match="images pull"):
            private_store.pull(bad)


def test_a_registry_json_dataset_loads_from_a_checkout_at_its_pinned_commit(tmp_path):
    """Harbor's registry.json (harbor/models/registry.py: a list of DatasetSpec, each task a
    RegistryTaskId {name, git_url, git_commit_id, path}) read against a local checkout: tasks at
    their paths, a path leading out of the checkout and a checkout at another commit each refused
    with one line naming the task."""
    import shutil

    from termforge.evals.harbor_registry import load_registry_dataset

    checkout = tmp_path / "tb2"
    shutil.copytree(ROOT / "tests" / "data" / "tb2_format", checkout)
    git = ["git", "-C", str(checkout), "-c", "user.name=t", "-c", "user.email=t@t.invalid"]
    subprocess.run(git + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "-A"], check=True)
    subprocess.run(git + ["commit", "-qm", "tasks"], check=True)
    head = subprocess.run(git + ["rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    url = "https://example.invalid/terminal-bench-2.git"

    def registry(commit, paths):
        path = tmp_path / f"registry-{commit[:6]}.json"
        path.write_text(json.dumps([{"name": "terminal-bench", "version": "2.0", "description": "d", "tasks": [
            {"name": n, "git_url": url, "git_commit_id": commit, "path": p} for n, p in paths]}]))
        return path

    reg = registry(head, [("count-log-levels", "count-log-levels"), ("escape", "../outside")])
    tasks, broken = load_registry_dataset(reg, "terminal-bench@2.0", checkout)
    assert [t.name for t in tasks] == ["count-log-levels"]
    assert [b.name for b in broken] == ["escape"] and "would lie outside" in broken[0].reason
    tasks, broken = load_registry_dataset(reg, "terminal-bench", {url: checkout})
    assert len(tasks) == 1

    stale = registry("0" * 40, [("count-log-levels", "count-log-levels")])
    tasks, broken = load_registry_dataset(stale, "terminal-bench@2.0", checkout)
    assert tasks == [] and f"is at {head[:12]}, the registry pins 000000000000" in broken[0].reason
    with pytest.raises(TermforgeError, match=r"no dataset 'terminal-bench@9.9' \(it lists terminal-bench@2.0\)"):
        load_registry_dataset(reg, "terminal-bench@9.9", checkout)


@needs_bwrap
@pytest.mark.parametrize("user_lines, expected", [
    ("", "0 0 root"),  # Docker's default: root
    ("RUN useradd -u 4321 -M -d /home/user tfuser\nUSER tfuser\n", "4321 4321 tfuser"),
    ("RUN groupadd -g 2345 tfgroup\nUSER 3456:tfgroup\n", "3456 2345 3456"),
    ("USER tf-ghost\n", "no user 'tf-ghost' in the image's /etc/passwd"),
])
def test_commands_run_as_the_images_user(tmp_path, user_lines, expected):
    """Harbor's exec runs as the image's User when the task names none (harbor/models/task/
    config.py AgentConfig.user: "None uses the environment's default USER (e.g., root)"); inside
    the sandbox only, with no capability. A User the image does not define is an environment error."""
    from termforge.evals.harbor_tasks import EnvironmentUnsupported, start_harbor_session
    from termforge.runtime.base import Limits

    d = _tool_task(tmp_path / "tasks", "debian:bookworm-slim")
    (d / "environment" / "Dockerfile").write_text(f"FROM debian:bookworm-slim\n{user_lines}WORKDIR /app\n")
    built = build_harbor_image(load_harbor_task(d), tmp_path / "images")
    assert built.ok, built.reason
    limits = Limits(wall_sec=60, cpu_sec=30, memory_mb=1024)
    if "no user" in expected:
        with pytest.raises(EnvironmentUnsupported, match=expected):
            start_harbor_session(built.image, limits)
        return
    with start_harbor_session(built.image, limits) as session:
        res = session.exec("echo $(id -u) $(id -g) $(id -un 2>/dev/null); grep '^Cap[EP]' /proc/self/status")
    assert res.exit_code == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == expected
    assert lines[1:] and all(line.split()[1] == "0000000000000000" for line in lines[1:]), lines


@needs_bwrap
def test_an_image_whose_config_changes_is_built_again(tmp_path, private_store):
    """The same Dockerfile on the same layers under a config that changed (an image re-added with
    another Env) is another build: the cached one would carry the old PATH."""
    base = register_base(ensure_base("debian-bookworm-slim"), private_store)[0]
    layer = _tool_layer(tmp_path / "tool.tar")
    task_dir = _tool_task(tmp_path / "tasks", "localhost/tf-config-change:1")
    paths = []
    for extra in ("/opt/tf-first", "/opt/tf-second"):
        private_store.add_layers("localhost/tf-config-change:1", [(layer, None)], base=base,
                                 env=[f"PATH={extra}:{TOOL_PATH}"], history=[extra])
        built = build_harbor_image(load_harbor_task(task_dir), tmp_path / "images")
        assert built.ok, built.reason
        paths.append(built.image.meta["env"]["PATH"].split(":")[0])
    assert paths == ["/opt/tf-first", "/opt/tf-second"]
