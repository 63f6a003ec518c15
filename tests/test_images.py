"""Images (docs/images.md): declared bases built by mmdebstrap into the user's image cache,
pinned by their lock, reproducible layers, derived bases for extra Debian packages, the local
OCI store, and host independence: every sandbox (build, agent command, agent shell, grader,
Harbor build and session) runs on the image's root filesystem, never on the host's /usr."""

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import built_family_tasks
from termforge.errors import ConfigError, TermforgeError
from termforge.images import DEFAULT_BASE, declaration, derive, ensure_base, ensure_task_base, load_declarations
from termforge.images.build import MOUNT_POINTS, base_key, read_lock, write_layer
from termforge.images.store import file_sha256, image_cache_dir
from termforge.images.store import ImageStore
from termforge.io import read_json
from termforge.runtime.base import Limits
from termforge.images.runtimes import BwrapRuntime
from termforge.runtime.bwrap import HOST_ROOTFS, sandbox_argv

TB2 = Path(__file__).parent / "data" / "tb2_format"
needs_images = pytest.mark.skipif(shutil.which("bwrap") is None or shutil.which("mmdebstrap") is None,
                                  reason="bubblewrap or mmdebstrap is not installed")
# Debian packages small enough to install in a test; the first the host lacks is the one used.
HOST_LACKS_CANDIDATES = ("datamash", "dc", "pv", "units")


# -- declarations -----------------------------------------------------------------------------------

def test_declarations_name_their_images_and_the_grader_packages():
    decls = load_declarations()
    base = decls[DEFAULT_BASE]
    assert {"python3", "python3-pytest"} <= base.all_packages()
    assert base.parent is decls["debian-bookworm-slim"] and base.epoch == decls["debian-bookworm-slim"].source_date_epoch
    assert declaration("termforge/base:bookworm") is base
    assert declaration("docker.io/library/debian:bookworm-slim") is decls["debian-bookworm-slim"]
    with pytest.raises(TermforgeError, match="no base image declaration named 'python:3.12'"):
        declaration("python:3.12")
    # Extra packages make a derived base named by the set; packages the base has make none.
    assert derive(base, ["python3", "python3-numpy"]) is base
    assert derive(base, ["mawk"], installed={"mawk"}) is base
    d1, d2 = derive(base, ["jq", "gcc"]), derive(base, ["gcc", "jq", "python3"])
    assert d1.name == d2.name and d1.packages == ("gcc", "jq") and d1.parent is base and d1.derived
    with pytest.raises(TermforgeError, match="not Debian package names"):
        derive(base, ["-o APT::evil=1"])


@pytest.mark.parametrize("text, problem", [
    ("suite: bookworm\nsources: ['deb http://x bookworm main']\nsource_date_epoch: 1\nbogus: 1\n", "unknown keys ['bogus']"),
    ("from: nowhere\npackages: [python3]\n", "from: no base named 'nowhere'"),
    ("suite: bookworm\nsources: ['deb http://x bookworm main']\nsource_date_epoch: 1\npackages: ['Bad Name']\n",
     "packages: not Debian package names"),
    ("suite: bookworm\nsource_date_epoch: 1\n", "sources: required for a root base"),
    ("suite: bookworm\nsources: ['http://x']\nsource_date_epoch: 1\n", "sources: expected a list of apt source lines"),
    ("suite: [unclosed\n", "cannot be read as YAML"),
])
def test_a_bad_declaration_is_one_clear_error(tmp_path, text, problem):
    (tmp_path / "mybase.yaml").write_text(text)
    with pytest.raises(ConfigError) as exc:
        load_declarations(tmp_path)
    assert f"base image declaration {tmp_path / 'mybase.yaml'}: {problem}" in str(exc.value)


# -- the built base ---------------------------------------------------------------------------------

@needs_images
def test_base_is_cached_pinned_and_ready_for_sandboxes(base_images):
    b = base_images
    assert ensure_base(DEFAULT_BASE).dir == b.dir  # from the cache, not rebuilt
    assert b.dir.parent == image_cache_dir() / "bases"
    # The digest is the layer's sha256; the lock is every installed package's exact version.
    assert b.digest == file_sha256(b.layer)
    lock = (b.dir / "lock.txt").read_text()
    assert re.search(r"^python3\t\S+\t\S+$", lock, re.M) and re.search(r"^python3-pytest\t\S+\t", lock, re.M)
    assert b.record["lock_digest"] == "sha256:" + hashlib.sha256(lock.encode()).hexdigest()
    assert lock.splitlines() == ["\t".join(row) for row in read_lock(b.rootfs)]
    # Mount points for every bind, no device nodes, nothing naming the build host.
    for rel in MOUNT_POINTS:
        assert (b.rootfs / rel).is_dir(), rel
    assert not any((b.rootfs / "dev").iterdir())
    assert (b.rootfs / "etc" / "hostname").read_text() == "termforge\n"
    assert (b.rootfs / "etc" / "resolv.conf").read_text() == ""
    assert "user:x:1000:1000:" in (b.rootfs / "etc" / "passwd").read_text()
    # The key follows the declaration: the same one gives the same key, another package another.
    decl, parent = declaration(DEFAULT_BASE), ensure_base("debian-bookworm-slim")
    assert base_key(decl, parent) == b.key
    assert base_key(derive(decl, ["datamash"]), b) != b.key
    assert b.record["parent"]["digest"] == parent.digest


def test_layers_are_reproducible(tmp_path):
    root = tmp_path / "rootfs"
    (root / "usr" / "bin").mkdir(parents=True)
    (root / "usr" / "bin" / "tool").write_text("#!/bin/sh\necho hi\n")
    os.chmod(root / "usr" / "bin" / "tool", 0o755)
    (root / "etc").mkdir()
    (root / "etc" / "conf").write_text("a=1\n")
    first, _ = write_layer(root, tmp_path / "a.tar", 1700000000)
    os.utime(root / "etc" / "conf", (2000000000, 2000000000))  # a later rebuild: times are clamped
    second, _ = write_layer(root, tmp_path / "b.tar", 1700000000)
    assert first == second == file_sha256(tmp_path / "a.tar")
    (root / "etc" / "conf").write_text("a=2\n")
    assert write_layer(root, tmp_path / "c.tar", 1700000000)[0] != first


# -- host independence ------------------------------------------------------------------------------

def _mounts(mountinfo: str) -> dict[str, str]:
    """mount point -> the path its source was bound from (mountinfo's fourth field)."""
    out = {}
    for line in mountinfo.splitlines():
        fields = line.split()
        if len(fields) > 4:
            out[fields[4]] = fields[3]
    return out


def _host_usr_binds(mountinfo: str) -> list[str]:
    # (A task that declares network access gets the host's resolver at /etc/resolv.conf, as a
    # container engine gives it; nothing else of the host's /etc or /usr.)
    return [f"{m} <- {src}" for m, src in _mounts(mountinfo).items() if m != "/etc/resolv.conf" and (
            m in ("/usr", "/etc") or src in ("/usr", "/etc") or src.startswith(("/usr/", "/etc/")))]


@pytest.fixture
def host_only_program(base_images):
    """A program on the host's PATH that the image lacks: a script put in /usr/local/bin for the
    test (as root), else a compiler the host has and the image does not."""
    if os.geteuid() == 0:
        path = Path(f"/usr/local/bin/tf-host-only-{os.getpid()}")
        path.write_text("#!/bin/sh\necho host\n")
        path.chmod(0o755)
        try:
            yield path.name
        finally:
            path.unlink(missing_ok=True)
        return
    for prog in ("gcc", "make", "jq"):
        if shutil.which(prog) and not (base_images.rootfs / "usr" / "bin" / prog).exists():
            yield prog
            return
    pytest.skip("no program on this host that the image lacks")


GRADER_CHECK = '''import os, shutil, subprocess


def test_the_grader_runs_on_the_image():
    mounts = {{}}
    for line in open("/proc/self/mountinfo").read().splitlines():
        fields = line.split()
        mounts[fields[4]] = fields[3]
    assert mounts["/"].endswith("/rootfs"), mounts["/"]
    assert "/usr" not in mounts and "/etc" not in mounts
    assert not any(src == "/usr" or src.startswith("/usr/") for src in mounts.values())
    assert shutil.which("{prog}") is None
    assert shutil.which("python3") == "/usr/bin/python3"
    import numpy  # noqa: F401 - a package of the image
'''


def _probe_task(root: Path, prog: str) -> Path:
    d = root / "tf-image-probe"
    (d / "environment" / "fixtures").mkdir(parents=True)
    (d / "tests").mkdir()
    (d / "environment" / "setup.sh").write_text(
        "#!/bin/bash\nset -e\ncat /proc/self/mountinfo > /app/build_mounts\n"
        f"(command -v {prog} || echo absent) > /app/build_which\nreadlink -f /usr/bin/python3 > /app/build_python\n")
    (d / "task.json").write_text(json.dumps({"id": d.name, "environment": {"apt_packages": []}}))
    (d / "tests" / "test_final_state.py").write_text(GRADER_CHECK.format(prog=prog))
    return d


def test_image_sandboxes_bind_no_host_path_and_host_mode_is_the_old_layout(tmp_path):
    layer = tmp_path / "layer"
    layer.mkdir()
    (tmp_path / "usr").mkdir()
    image = sandbox_argv(layer, ["true"], rootfs=tmp_path)
    assert image[:4] == ["bwrap", "--ro-bind", str(tmp_path), "/"]
    assert not any(src in ("/usr", "/etc") for src in image)
    host = sandbox_argv(layer, ["true"], rootfs=HOST_ROOTFS)
    assert host[:8] == ["bwrap", "--tmpfs", "/", "--ro-bind", "/usr", "/usr", "--ro-bind", "/etc"]
    with pytest.raises(TermforgeError, match="no image root filesystem"):
        sandbox_argv(layer, ["true"], rootfs="")


@needs_images
def test_no_sandbox_kind_sees_the_host_usr_or_a_host_only_program(tmp_path, host_only_program):
    from termforge.evals.harbor_tasks import build_harbor_image, load_harbor_task, start_harbor_session
    from termforge.grading.verifier import run_verifier

    prog = host_only_program
    assert shutil.which(prog), "the program must be on the host's PATH for the test to mean anything"
    rt = BwrapRuntime()
    built = rt.build(_probe_task(tmp_path, prog), tmp_path / "images")
    assert built.ok, built.reason
    layer = built.image.path / "layer"
    # build (setup.sh)
    assert _host_usr_binds((layer / "build_mounts").read_text()) == []
    assert _mounts((layer / "build_mounts").read_text())["/"] == str(built.image.rootfs)
    assert (layer / "build_which").read_text().strip() == "absent"
    assert (layer / "build_python").read_text().strip() == "/usr/bin/python3.11"
    limits = Limits(wall_sec=60, cpu_sec=30, memory_mb=2048)
    with rt.start(built.image, limits) as session:
        # agent commands
        res = session.exec(f"cat /proc/self/mountinfo; command -v {prog} || echo absent")
        assert res.ok and _host_usr_binds(res.stdout) == [] and res.stdout.rstrip().endswith("absent")
        # the agent's persistent shell
        shell = session.open_shell()
        try:
            out = shell.run(f"cat /proc/self/mountinfo; command -v {prog} || echo absent; {prog}", 30)
        finally:
            shell.close()
        assert _host_usr_binds(out.stdout) == [] and "absent" in out.stdout and out.exit_code == 127
        # the grader: its own test asserts the same from inside
        verdict = run_verifier(session, tmp_path / "tf-image-probe", timeout=60,
                               expected=["test_final_state.py::test_the_grader_runs_on_the_image"])
        assert verdict.reward == 1.0 and verdict.tests_ran, verdict.reason
    # Terminal-Bench (Harbor) build and session
    task_dir = tmp_path / "harbor-probe"
    shutil.copytree(TB2 / "count-log-levels", task_dir)
    (task_dir / "environment" / "Dockerfile").write_text(
        "FROM debian:bookworm-slim\nRUN apt-get update && apt-get install -y python3 python3-pytest\nWORKDIR /app\n"
        f"RUN cat /proc/self/mountinfo > /app/build_mounts && (command -v {prog} || echo absent) > /app/build_which\n")
    hb = build_harbor_image(load_harbor_task(task_dir), tmp_path / "himages")
    assert hb.ok, hb.reason
    assert _host_usr_binds((hb.image.path / "layer" / "build_mounts").read_text()) == []
    assert (hb.image.path / "layer" / "build_which").read_text().strip() == "absent"
    with start_harbor_session(hb.image, limits) as hs:
        res = hs.exec(f"cat /proc/self/mountinfo; command -v {prog} || echo absent")
        assert res.ok and _host_usr_binds(res.stdout) == [] and res.stdout.rstrip().endswith("absent")


@needs_images
def test_host_mode_is_an_explicit_opt_in_that_image_json_records(tmp_path):
    rt = BwrapRuntime(rootfs="host")
    built = rt.build(_probe_task(tmp_path, "true"), tmp_path / "images")
    assert built.ok, built.reason
    meta = read_json(built.image.path / "image.json")
    assert meta["rootfs"] == "host" and meta["base"] is None and built.image.rootfs == HOST_ROOTFS
    # The negative control of the check above: on the host's /usr the bind is there to see.
    assert "/usr <- /usr" in _host_usr_binds((built.image.path / "layer" / "build_mounts").read_text())
    assert BwrapRuntime().load(tmp_path / "images", "tf-image-probe").rootfs == HOST_ROOTFS
    with pytest.raises(ConfigError, match="runtime.rootfs"):
        BwrapRuntime(rootfs="container")


def _host_lacks() -> str:
    for pkg in HOST_LACKS_CANDIDATES:
        if shutil.which(pkg) is None:
            return pkg
    pytest.skip(f"this host has all of {HOST_LACKS_CANDIDATES}")


def _package_task(root: Path, pkg: str) -> Path:
    """A task whose setup, oracle and tests all need a Debian package the host lacks."""
    from termforge.generate.base import TaskSpec
    from termforge.generate.writer import task_files, write_task_dir

    numbers = [7, 3, 12, 5, 9, 1]
    tool = {"datamash": "datamash transpose", "dc": "tr '\\t' '\\n'", "pv": "pv -q | tr '\\t' '\\n'",
            "units": "tr '\\t' '\\n'"}[pkg]
    spec = TaskSpec(
        instruction="Sort the integers in `/app/data/numbers.txt` (one per line) in descending numeric order "
                    "and write them, one per line, to `/app/out/sorted.txt`.",
        setup_sh=f"#!/bin/bash\nset -euo pipefail\nmkdir -p /app/data\n{pkg} --version >/dev/null 2>&1 || "
                 f"command -v {pkg} >/dev/null\n{tool} < /tmp/env/fixtures/row.tsv > /app/data/numbers.txt\n",
        test_initial="from pathlib import Path\n\n\ndef test_input():\n"
                     f"    assert Path('/app/data/numbers.txt').read_text().split() == {[str(n) for n in numbers]!r}\n",
        test_final="import shutil\nfrom pathlib import Path\n\n\ndef test_sorted():\n"
                   f"    assert Path('/app/out/sorted.txt').read_text().split() == "
                   f"{[str(n) for n in sorted(numbers, reverse=True)]!r}\n\n\n"
                   f"def test_the_package_is_in_the_image():\n    assert shutil.which('{pkg}')\n",
        solve_sh=f"#!/bin/bash\nset -e\ncommand -v {pkg} >/dev/null\nmkdir -p /app/out\n"
                 "sort -rn /app/data/numbers.txt > /app/out/sorted.txt\n",
        truth={"sorted": sorted(numbers, reverse=True)}, method_note="sort numerically, descending",
        verifier_kind="exact_text", fixture_kind="text_only",
        fixtures={"row.tsv": ("\t".join(map(str, numbers)) + "\n").encode()},
        output_paths=["/app/out/sorted.txt"], apt_packages=(pkg,))
    task = {"id": f"tf-needs-{pkg}", "signature": {"id": f"tf-needs-{pkg}", "domain": "file_operations"},
            "instruction": spec.instruction, "family": "test", "environment": {"apt_packages": [pkg]}}
    final = root / "tasks" / task["id"]
    write_task_dir(final, task_files(task, spec, "termforge/base:bookworm"))
    return final


@needs_images
@pytest.mark.slow
def test_a_task_needing_a_package_the_host_lacks_builds_validates_and_solves(tmp_path):
    from termforge.harness import HarnessConfig
    from termforge.models.base import SamplingParams
    from termforge.quality.validate import validate_task
    from termforge.solve import OracleReplayModel, SolveSettings, rollout_once

    pkg = _host_lacks()
    task_dir = _package_task(tmp_path, pkg)
    assert read_json(task_dir / "task.json")["environment"] == {
        "apt_packages": [pkg], "base": "termforge/base:bookworm"}
    assert f"apt-get install -y --no-install-recommends {pkg}" in (task_dir / "environment" / "Dockerfile").read_text()
    rt, limits = BwrapRuntime(), Limits(wall_sec=60, cpu_sec=30, memory_mb=2048)
    verdict = validate_task(task_dir, rt, tmp_path / "images", limits, oracle_repeats=1, mutants=0)
    assert verdict.kept, (verdict.stage, verdict.reason)
    image = verdict.evidence["image"]
    derived = ensure_task_base(DEFAULT_BASE, [pkg])
    assert image["base_digest"] == derived.digest and pkg in derived.installed() and image["apt_packages"] == [pkg]
    assert derived.record["parent"]["name"] == DEFAULT_BASE and derived.record["derived"]
    settings = SolveSettings(k=1, concurrency=1, seed=1, limits=limits,
                             harness=HarnessConfig(turn_cap=4, command_timeout_sec=30, task_timeout_sec=120,
                                                   sampling=SamplingParams(max_new_tokens=64)))
    record = rollout_once(OracleReplayModel(tmp_path / "tasks"), rt, tmp_path / "images", task_dir, 0, settings, None)
    assert record["reward"] == 1.0, record["verifier"]


@needs_images
@pytest.mark.slow
def test_verdicts_do_not_depend_on_the_host_path(tmp_path, monkeypatch):
    """The embedded corpus's verdicts with a different host PATH and another Python (and a fake
    pytest) first on it: the same, because nothing of the host's PATH reaches a sandbox."""
    from termforge.quality.validate import validate_task

    tasks = built_family_tasks(tmp_path, ("log_level_filter", "account_audit"))
    rt, limits = BwrapRuntime(), Limits(wall_sec=60, cpu_sec=30, memory_mb=2048)

    def verdicts() -> list:
        out = []
        for t in tasks:
            v = validate_task(t, rt, tmp_path / "images", limits, oracle_repeats=1, mutants=0)
            out.append((v.task_id, v.kept, v.stage, v.reason, v.checks, v.evidence["image"]["image_digest"]))
        return out

    before = verdicts()
    fake = tmp_path / "fakebin"
    fake.mkdir()
    (fake / "python3").symlink_to(sys.executable)
    (fake / "python").symlink_to(sys.executable)
    (fake / "pytest").write_text("#!/bin/sh\necho '1 passed'\nexit 0\n")
    (fake / "pytest").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:{os.environ['PATH']}")
    assert shutil.which("python3") == str(fake / "python3")
    after = verdicts()
    assert after == before and all(v[1] for v in before)


# -- the image store ----------------------------------------------------------------------------------

@needs_images
def test_store_names_bases_and_moves_them_to_a_machine_without_them(tmp_path, base_images, monkeypatch):
    store = ImageStore(tmp_path / "store")
    from termforge.images.store import register_base

    images = register_base(base_images, store)
    assert [i.name for i in images] == ["termforge/base:bookworm"]
    got = store.get("termforge/base:bookworm")
    assert got.layers[0]["digest"] == base_images.digest and got.labels["org.termforge.base.key"] == base_images.key
    # The layer went in as a hard link, not a copy.
    assert store.blob(base_images.digest).stat().st_ino == base_images.layer.stat().st_ino
    inspect = json.loads(subprocess.run(["skopeo", "inspect", store.oci_ref("termforge/base:bookworm")],
                                        capture_output=True, text=True, check=True).stdout)
    assert inspect["Layers"] == [base_images.digest] and inspect["Os"] == "linux"
    # To a cluster: an OCI archive, added to another machine's store; its cache then unpacks the
    # base from there instead of building it, to the same digest.
    archive = store.save("termforge/base:bookworm", tmp_path / "base.oci.tar")
    other = ImageStore(tmp_path / "other-store")
    added = other.add("termforge/base:bookworm", archive)
    assert added.labels["org.termforge.base.digest"] == base_images.digest
    register_base(ensure_base("debian-bookworm-slim"), other)
    # Another cache, as on another machine (where sandbox uids can reach it: not under pytest's
    # private tmp folders).
    cache = Path(tempfile.mkdtemp(prefix="tf-other-cache-"))
    os.chmod(cache, 0o755)
    monkeypatch.setenv("TERMFORGE_IMAGE_STORE", str(other.root))
    try:
        moved = ensure_base(DEFAULT_BASE, cache, log=lambda m: None)
    finally:
        monkeypatch.delenv("TERMFORGE_IMAGE_STORE")
    assert moved.digest == base_images.digest and moved.record["method"] == "store:termforge/base:bookworm"
    try:
        assert (moved.dir / "lock.txt").read_text() == (base_images.dir / "lock.txt").read_text()
    finally:
        shutil.rmtree(cache)


@needs_images
def test_images_add_takes_rootfs_tarballs_and_oci_archives_and_umoci_unpacks_them(tmp_path):
    rootfs = tmp_path / "rootfs"
    (rootfs / "bin").mkdir(parents=True)
    (rootfs / "bin" / "hello").write_text("#!/bin/sh\necho hello\n")
    subprocess.run(["tar", "-czf", str(tmp_path / "root.tar.gz"), "-C", str(rootfs), "bin"], check=True)
    store = ImageStore(tmp_path / "store")
    first = store.add("example/tiny:1", tmp_path / "root.tar.gz")
    assert first.name == "example/tiny:1" and len(first.layers) == 1
    assert [i.name for i in store.images()] == ["example/tiny:1"]
    unpacked = store.unpack("example/tiny:1", tmp_path / "bundle")
    assert (unpacked / "bin" / "hello").read_text() == "#!/bin/sh\necho hello\n"
    archive = store.save("example/tiny:1", tmp_path / "tiny.oci.tar")
    again = store.add("example/tiny:2", archive)
    assert again.config["rootfs"]["diff_ids"] == first.config["rootfs"]["diff_ids"]
    assert store.get("docker.io/example/tiny:2").name == "example/tiny:2"
    with pytest.raises(TermforgeError, match="is not a tar archive or OCI layout"):
        store.add("bad:1", tmp_path / "rootfs" / "bin" / "hello")
    with pytest.raises(TermforgeError, match="is not in the image store"):
        store.oci_ref("missing:1")


@needs_images
def test_images_cli_builds_lists_and_adds(tmp_path, capsys):
    from termforge import cli

    assert cli.main(["images", "build", DEFAULT_BASE]) == 0
    assert "base image(s) ready" in capsys.readouterr().out
    assert cli.main(["images", "list"]) == 0
    out = capsys.readouterr().out
    assert "termforge/base:bookworm" in out and "debian:bookworm-slim" in out
    assert cli.main(["images", "add", "tiny:1", str(tmp_path / "nope.tar"), "--store", str(tmp_path / "s")]) == 2
    assert "does not exist" in capsys.readouterr().err


@needs_images
@pytest.mark.slow
def test_oci_export_shares_the_base_and_unpacks_to_the_validated_image(tmp_path):
    """Task images as OCI: each is the base's layer plus its /app layer; the base is stored once;
    skopeo reads the archive, umoci unpacks the layout, and the unpacked image, run under
    termforge's own sandbox, scores the oracle 1 and a no-op 0."""
    from termforge.images.oci import export_task_images

    tasks = built_family_tasks(tmp_path, ("log_level_filter", "account_audit"))
    images = tmp_path / "images"
    out = export_task_images([(t.name, images / t.name) for t in tasks], tmp_path / "export" / "oci",
                             store=ImageStore(tmp_path / "store"))
    archive = Path(out["archive"])
    layers = {}
    for t in tasks:
        info = json.loads(subprocess.run(["skopeo", "inspect", f"oci-archive:{archive}:termforge/task:{t.name}"],
                                         capture_output=True, text=True, check=True).stdout)
        layers[t.name] = info["Layers"]
        meta = read_json(images / t.name / "image.json")
        assert info["Layers"][0] == meta["base"]["digest"] and len(info["Layers"]) == 2
        assert info["Labels"]["org.termforge.task.image-digest"] == meta["image_digest"]
    first, second = (layers[t.name] for t in tasks)
    assert first[0] == second[0] and first[1] != second[1]
    big = [p for p in (tmp_path / "export" / "oci" / "blobs" / "sha256").iterdir() if p.stat().st_size > 50_000_000]
    assert len(big) == 1  # the base layer, once
    task = tasks[0]
    # Unpacked where the sandbox's uid can reach it (pytest's tmp folders are private).
    reachable = Path(tempfile.mkdtemp(prefix="tf-oci-unpack-"))
    os.chmod(reachable, 0o755)
    try:
        _run_unpacked(tmp_path, task, images, reachable / "bundle",
                      f"{tmp_path / 'export' / 'oci'}:termforge/task:{task.name}")
    finally:
        shutil.rmtree(reachable)


def _run_unpacked(tmp_path, task, images, bundle, image_ref):
    """umoci-unpack an OCI image of `task`; its /app must be the tree termforge built, and run
    under termforge's sandbox (its /app as the task layer, its tree as /) the oracle scores 1
    and a no-op 0."""
    from termforge.runtime.base import Image
    from termforge.runtime.bwrap import tree_digest
    from termforge.grading.verifier import run_oracle, run_verifier

    subprocess.run(["umoci", "unpack", "--image", image_ref, str(bundle)], check=True, capture_output=True)
    os.chmod(bundle, 0o755)
    rootfs = bundle / "rootfs"
    assert tree_digest(rootfs / "app") == tree_digest(images / task.name / "layer")
    assert (rootfs / "usr" / "bin" / "python3").exists()
    # Run the unpacked image as a termforge image: its /app as the task layer, its tree as /.
    img_dir = tmp_path / "from-oci"
    shutil.copytree(rootfs / "app", img_dir / "layer", symlinks=True)
    image = Image(task.name, "bwrap", img_dir, "unpacked", rootfs=str(rootfs))
    rt, limits = BwrapRuntime(), Limits(wall_sec=60, cpu_sec=30, memory_mb=2048)
    with rt.start(image, limits) as s:
        assert run_oracle(s, task, timeout=60).ok
        assert run_verifier(s, task, timeout=60).reward == 1.0
    with rt.start(image, limits) as s:
        assert run_verifier(s, task, timeout=60).reward == 0.0


@needs_images
@pytest.mark.slow
@pytest.mark.skipif(shutil.which("buildah") is None or shutil.which("unshare") is None, reason="buildah not installed")
def test_the_exported_dockerfile_builds_with_buildah_from_the_store_to_the_same_image(tmp_path):
    """environment/Dockerfile starts FROM the base as the store names it: buildah (chroot
    isolation, vfs storage, offline inside `unshare --net`) builds it from the store alone, on
    the very base layer termforge validated on, to the same /app; oracle 1, no-op 0 on it."""
    tasks = built_family_tasks(tmp_path, ("log_level_filter",))
    task, images = tasks[0], tmp_path / "images"
    meta = read_json(images / task.name / "image.json")
    assert (task / "environment" / "Dockerfile").read_text().startswith(f"FROM {meta['base']['names'][0]}\n")
    store, storage = ImageStore(), tmp_path / "storage"
    store.to_containers_storage(meta["base"]["names"][0], storage / "root", storage / "runroot")
    buildah = ["buildah", "--root", str(storage / "root"), "--runroot", str(storage / "runroot"),
               "--storage-driver", "vfs"]
    subprocess.run(["unshare", "--net", *buildah, "bud", "--isolation", "chroot", "--pull=never",
                    "--timestamp", "1700000000", "-t", "localhost/task:1", str(task / "environment")],
                   check=True, capture_output=True)
    subprocess.run([*buildah, "push", "localhost/task:1", f"oci:{tmp_path / 'built'}:task"], check=True,
                   capture_output=True)
    config = json.loads(subprocess.run(["skopeo", "inspect", "--config", f"oci:{tmp_path / 'built'}:task"],
                                       capture_output=True, text=True, check=True).stdout)
    assert config["rootfs"]["diff_ids"][0] == meta["base"]["digest"]  # (push compresses; diff_ids do not)
    reachable = Path(tempfile.mkdtemp(prefix="tf-buildah-unpack-"))
    os.chmod(reachable, 0o755)
    try:
        _run_unpacked(tmp_path, task, images, reachable / "bundle", f"{tmp_path / 'built'}:task")
    finally:
        shutil.rmtree(reachable)


@needs_images
@pytest.mark.slow
def test_a_harbor_task_from_an_image_added_to_the_store_runs_natively(tmp_path, monkeypatch):
    """FROM an image a user added to the store (here a root filesystem tarball, as `docker
    export` gives one): unpacked as a base, its apt-get installs a derived base on it, and the
    task scores as Harbor would; FROM an image the store lacks is an environment error."""
    store = ImageStore(tmp_path / "store")
    monkeypatch.setenv("TERMFORGE_IMAGE_STORE", str(store.root))
    store.add("example/bookworm-slim:1", ensure_base("debian-bookworm-slim").layer)
    # The oracle's solution is bound from the task folder: where the sandbox's uid can reach it.
    reachable = Path(tempfile.mkdtemp(prefix="tf-from-store-"))
    os.chmod(reachable, 0o755)
    try:
        _from_store(tmp_path, reachable)
    finally:
        shutil.rmtree(reachable)


def _from_store(tmp_path: Path, reachable: Path) -> None:
    from termforge.evals.harbor_tasks import load_harbor_task
    from termforge.evals.tbench import noop_agent, oracle_agent, run_native

    tasks = []
    for name, image in (("from-store", "example/bookworm-slim:1"), ("from-nowhere", "example/absent:1")):
        task_dir = reachable / name
        shutil.copytree(TB2 / "count-log-levels", task_dir)
        dockerfile = task_dir / "environment" / "Dockerfile"
        dockerfile.write_text(dockerfile.read_text().replace("FROM debian:bookworm-slim", f"FROM {image}"))
        tasks.append(load_harbor_task(task_dir))
    images = tmp_path / "images"
    oracle = run_native(tasks, oracle_agent, 1, images, tmp_path / "oracle")
    noop = run_native(tasks[:1], noop_agent, 1, images, tmp_path / "noop")
    by_task = {t.task_name: t for t in oracle.trials}
    assert by_task["from-store"].reward == 1.0 and [t.reward for t in noop.trials] == [0.0]
    meta = read_json(images / "from-store" / "image.json")
    assert meta["base_request"] == {"base": "example/bookworm-slim:1", "apt_packages": ["python3", "python3-pytest"]}
    assert meta["base"]["name"].startswith("store-example-bookworm-slim-1+")
    absent = by_task["from-nowhere"]
    assert absent.reward is None and absent.error_kind == "environment"
    assert "base image example/absent:1 is not in termforge's image store" in absent.exception_message


@pytest.mark.skipif(os.geteuid() != 0, reason="applying layers chroots into the tree (root)")
def test_buildah_layers_apply_over_a_hard_linked_base_without_writing_through(tmp_path):
    """A Dockerfile build's root filesystem is the base's, hard-linked, with the build's layers
    applied (termforge.images.layers): whiteouts and opaque directories honoured, a changed file
    replaced, so the base's copy (the same inode) never changes; a layer's absolute symlink
    resolves inside the tree."""
    import io
    import tarfile

    base = tmp_path / "base"
    (base / "etc").mkdir(parents=True)
    (base / "etc" / "conf").write_text("base\n")
    (base / "gone").write_text("x\n")
    (base / "opaque").mkdir()
    (base / "opaque" / "old").write_text("old\n")
    rootfs = tmp_path / "rootfs"
    subprocess.run(["cp", "-al", str(base), str(rootfs)], check=True)
    assert (rootfs / "etc" / "conf").stat().st_ino == (base / "etc" / "conf").stat().st_ino
    layer = tmp_path / "layer.tar"
    files = tmp_path / "files"
    files.mkdir()
    (files / "conf").write_text("built\n")
    (files / "new").write_text("new\n")
    (files / "empty").write_text("")
    with tarfile.open(layer, "w") as tar:
        tar.add(files / "conf", "etc/conf")
        tar.add(files / "empty", ".wh.gone")
        tar.add(files / "empty", "opaque/.wh..wh..opq")
        tar.add(files / "new", "opaque/new")
        link = tarfile.TarInfo("link")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc"
        tar.addfile(link)
        through = tarfile.TarInfo("link/through")
        through.size = 4
        tar.addfile(through, io.BytesIO(b"via\n"))
    res = subprocess.run([sys.executable, "-m", "termforge.images.layers", str(rootfs), str(layer)],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert (rootfs / "etc" / "conf").read_text() == "built\n" and (base / "etc" / "conf").read_text() == "base\n"
    assert not (rootfs / "gone").exists() and (base / "gone").exists()
    assert sorted(os.listdir(rootfs / "opaque")) == ["new"] and (base / "opaque" / "old").exists()
    assert (rootfs / "etc" / "through").read_text() == "via\n"  # the image's /etc, not the host's
    assert not Path("/etc/through").exists()


# -- Dockerfile builds: whose failure it is (a builder's own failure is retried, never the task's) --

needs_buildah = pytest.mark.skipif(shutil.which("buildah") is None or shutil.which("bwrap") is None,
                                   reason="buildah or bwrap is not installed")
# A stand-in for buildah on PATH: the real one, except that its first FAILS `bud`s run RUN steps
# with a runtime failing as buildah's own re-exec did in the gate ("Close_Fd sealing memfd copy").
STANDIN_BUILDAH = """#!/bin/sh
d={dir}
case " $* " in
  *" bud "*)
    n=$(( $(cat $d/buds 2>/dev/null || echo 0) + 1 )); echo $n > $d/buds
    if [ $n -le $(cat $d/fails) ]; then
      for a in "$@"; do shift; case $a in */step-runtime) a=$d/busy-runtime;; esac; set -- "$@" "$a"; done
    fi;;
esac
exec {buildah} "$@"
"""
BUSY_RUNTIME = """#!/bin/sh
echo "Close_Fd sealing memfd copy: Device or resource busy" >&2
exit 1
"""
# And a stand-in for bwrap whose first BWRAP_FAILS sandboxes cannot be set up.
STANDIN_BWRAP = """#!/bin/sh
d={dir}
n=$(( $(cat $d/bwraps 2>/dev/null || echo 0) + 1 )); echo $n > $d/bwraps
if [ $n -le $(cat $d/bwrap_fails) ]; then echo "bwrap: Can't mount proc on /newroot/proc: Device or resource busy" >&2; exit 1; fi
exec {bwrap} "$@"
"""


@pytest.fixture
def standin_buildah(monkeypatch):
    """(set how many `bud`s and bwrap sandboxes fail, read how many `bud`s ran, make a build
    context): a stand-in buildah and bwrap first on PATH."""
    from termforge.images import dockerfile

    d = Path(tempfile.mkdtemp(prefix="tf-standin-buildah-"))
    d.chmod(0o777)  # the build's namespace root (an unprivileged host uid) counts its calls here
    (d / "buildah").write_text(STANDIN_BUILDAH.format(dir=d, buildah=shutil.which("buildah")))
    (d / "busy-runtime").write_text(BUSY_RUNTIME)
    (d / "bwrap").write_text(STANDIN_BWRAP.format(dir=d, bwrap=shutil.which("bwrap")))
    (d / "bwrap_fails").write_text("0")
    for name in ("buildah", "busy-runtime", "bwrap"):
        (d / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{d}:{os.environ['PATH']}")
    monkeypatch.setattr(dockerfile, "RETRY_PAUSE_SEC", 0.0)

    def fails(n: int, bwrap: int = 0) -> None:
        """The next n `bud`s (counted from the first) fail; the next `bwrap` sandboxes fail to set up."""
        (d / "fails").write_text(str(n))
        (d / "bwrap_fails").write_text(str(bwrap))
        (d / "bwraps").unlink(missing_ok=True)

    def buds() -> int:
        return int((d / "buds").read_text()) if (d / "buds").exists() else 0

    def context(body: str) -> Path:
        """A build context whose Dockerfile no earlier run built (a fresh token in it): never cached."""
        import secrets

        ctx = Path(tempfile.mkdtemp(prefix="context-", dir=d))
        ctx.chmod(0o755)
        (ctx / "Dockerfile").write_text(f"FROM debian:bookworm-slim\nRUN echo {secrets.token_hex(8)} > /token\n{body}")
        return ctx

    fails(0)
    yield fails, buds, context
    shutil.rmtree(d, ignore_errors=True)


@needs_buildah
def test_a_builders_transient_failure_is_retried_and_a_dockerfiles_own_failure_is_not(standin_buildah):
    """Item 7 of issue 39: buildah's RUN step ended with `Close_Fd sealing memfd copy: Device or
    resource busy`. Injected here for real (a stand-in buildah whose first build runs its RUN steps
    with a runtime failing that way; a stand-in bwrap whose first sandbox cannot be set up): the
    build is tried again and succeeds. A RUN that exits non-zero, or names a program the image
    lacks, is the Dockerfile's: one try, a DockerfileError, never a BuilderError."""
    from termforge.images.dockerfile import BuilderError, DockerfileError, build_dockerfile

    fails, buds, context = standin_buildah
    base = ensure_task_base("debian:bookworm-slim", [], None)
    messages = []
    ctx = context("RUN echo built > /built\n")
    fails(1)
    built = build_dockerfile(ctx, ctx / "Dockerfile", base, log=messages.append)
    assert buds() == 2 and (built.rootfs / "built").read_text() == "built\n"
    assert any("failed on the Dockerfile" in m and "for its own reason (try 1 of 3)" in m for m in messages), messages

    # The step sandbox itself could not be set up (bwrap failed before the step's command): the builder's.
    unset = context("RUN echo built > /built\n")
    before = buds()
    fails(0, bwrap=1)
    built = build_dockerfile(unset, unset / "Dockerfile", base, log=messages.append)
    assert buds() == before + 2 and (built.rootfs / "built").read_text() == "built\n"

    for body, said in (("RUN echo about to fail; exit 3\n", "exit status 3"),
                       ('RUN ["/no/such/program"]\n', "no/such/program")):
        broken = context(body)
        before = buds()
        fails(0)
        with pytest.raises(DockerfileError) as err:
            build_dockerfile(broken, broken / "Dockerfile", base, log=messages.append)
        assert not isinstance(err.value, BuilderError) and said in str(err.value), err.value
        assert buds() == before + 1  # not retried


@needs_buildah
def test_a_persistent_builder_failure_is_an_infrastructure_error_naming_the_builder(standin_buildah, tmp_path):
    """Every try fails for the builder's reason: a BuilderError naming buildah after BUILD_ATTEMPTS
    tries; in the native Terminal-Bench runner the trial is recorded (not dropped) as the
    harness's BuilderInfraError with no valid reward, never the task's EnvironmentBuildError."""
    from termforge.evals.harbor_tasks import load_harbor_task
    from termforge.evals.tbench import noop_agent, run_native
    from termforge.images.dockerfile import BUILD_ATTEMPTS

    fails, buds, _context = standin_buildah
    fails(99)
    task_dir = tmp_path / "tb-builder-down"
    shutil.copytree(Path(__file__).resolve().parents[1] / "benchmarks" / "tb-mini" / "log-error-summary", task_dir)
    dockerfile = task_dir / "environment" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + f"RUN echo {os.getpid()}-{os.urandom(4).hex()} > /app/token\n")
    res = run_native([load_harbor_task(task_dir)], noop_agent, 1, tmp_path / "images", tmp_path / "job")
    assert buds() == BUILD_ATTEMPTS
    trial = read_json(tmp_path / "job" / res.trials[0].trial_name / "result.json")
    info = trial["exception_info"]
    assert info["exception_type"] == "BuilderInfraError", info
    assert "the builder (buildah" in info["exception_message"] and "not the Dockerfile's" in info["exception_message"]
    assert "Device or resource busy" in info["exception_message"]
    assert res.trials[0].reward is None and res.trials[0].error_kind == "error"
    assert res.summary["n_environment_errors"] == 0 and res.summary["n_errors"] == 1


@pytest.mark.parametrize("output, steps, owner", [
    # the step sandbox saw the RUN's own command end non-zero: the Dockerfile's, whatever the log says
    ('Error: building at STEP "RUN make": while running runtime: exit status 2', [{"started": True, "exit": 2}],
     "dockerfile"),
    ("Error: building at STEP \"RUN x\": Device or resource busy", [{"started": True, "exit": 1}], "dockerfile"),
    # buildah failed at a RUN whose command never ran, or ran and ended well: the builder's
    ('error running container: Close_Fd sealing memfd copy: Device or resource busy\n'
     'Error: building at STEP "RUN apt-get update": while running runtime: exit status 1', [], "builder"),
    ('Error: building at STEP "RUN true": committing: no space left on device', [{"started": True, "exit": 0}],
     "builder"),
    ('Error: building at STEP "RUN x": while running runtime: exit status 1', [{"started": False, "exit": 1}],
     "builder"),
    # outside RUN steps: buildah's own final error decides
    ('Error: building at STEP "COPY nope /x": checking on sources: no such file or directory', [], "dockerfile"),
    ("Error: creating build container: nosuch: image not known", [], "dockerfile"),
    ("Error: acquiring lock on the storage: resource temporarily unavailable", [], "builder"),
    ("panic: runtime error: index out of range\ngoroutine 1 [running]:", [], "builder"),
    # words of the Dockerfile's own cannot make its failure the builder's
    ('Error: building at STEP "COPY lock /x": checking on sources: copier: stat: "/lock": no such file or directory',
     [], "dockerfile"),
    ("", [], "builder"),  # died without a word
    # a step's output cannot pass for buildah's final error: the last one is buildah's
    ('Error: building at STEP "COPY a b": fake\nError: building at STEP "RUN x": while running runtime: exit status 1',
     [], "builder"),
])
def test_failure_owner_reads_the_step_sandboxs_record_before_the_log(output, steps, owner):
    from termforge.images.dockerfile import failure_owner

    assert failure_owner(output, steps, "FROM debian:bookworm-slim\nCOPY lock /x\nRUN make\n") == owner


def test_the_step_sandbox_binds_only_the_builds_folders_and_grants_no_capability_that_undoes_it(tmp_path):
    """The step sandbox's bwrap command line: the working container as /, bwrap's own /dev and
    /proc, no /sys or cgroups whatever the OCI spec asks, a new pid/net/ipc/uts namespace, only
    allow-listed capabilities (never SYS_ADMIN, SYS_PTRACE, SYS_MODULE), no capability for a USER
    step; a bind source outside the build's folders is refused."""
    from termforge.images.step_sandbox import ALLOWED_CAPS, StepError, bwrap_argv

    build = tmp_path / "build"
    (build / "rootfs").mkdir(parents=True)
    (build / "hostname").write_text("x\n")
    spec = {"root": {"path": str(build / "rootfs")}, "hostname": "h",
            "process": {"user": {"uid": 0, "gid": 0}, "args": ["/bin/sh", "-c", "true"], "cwd": "/app",
                        "env": ["PATH=/usr/bin"],
                        "capabilities": {"bounding": ["CAP_CHOWN", "CAP_SYS_ADMIN", "CAP_SYS_PTRACE", "CAP_SETUID",
                                                      "CAP_SYS_MODULE", "CAP_SYS_CHROOT"]}},
            "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"},
                       {"destination": "/sys", "type": "bind", "source": "/sys", "options": ["rbind", "ro"]},
                       {"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup"},
                       {"destination": "/dev/shm", "type": "bind", "source": "/dev/shm", "options": ["rbind"]},
                       {"destination": "/etc/hostname", "type": "bind", "source": str(build / "hostname"),
                        "options": ["rbind"]}]}
    argv = bwrap_argv(spec, [str(build)], lambda path: path)
    assert argv[argv.index("--bind") + 1:argv.index("--bind") + 3] == [str(build / "rootfs"), "/"]
    binds = [(argv[i + 1], argv[i + 2]) for i, a in enumerate(argv) if a in ("--bind", "--ro-bind")]
    assert binds == [(str(build / "rootfs"), "/"), (str(build / "hostname"), "/etc/hostname")], binds
    assert "/sys" not in argv and "/sys/fs/cgroup" not in argv
    assert {"--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--proc"} <= set(argv)
    # /dev and /dev/shm are tmpfs of their own, capped; the only host nodes are harmless ones
    tmpfs = {argv[i + 1]: int(argv[i - 1]) for i, a in enumerate(argv) if a == "--tmpfs" and argv[i - 2] == "--size"}
    assert tmpfs["/dev"] <= 1 << 20 and tmpfs["/dev/shm"] <= 64 << 20, tmpfs
    assert {argv[i + 1] for i, a in enumerate(argv) if a == "--dev-bind"} == {
        f"/dev/{n}" for n in ("null", "zero", "full", "random", "urandom", "tty")}
    caps = {argv[i + 1] for i, a in enumerate(argv) if a == "--cap-add"}
    assert caps == {"CAP_CHOWN", "CAP_SETUID", "CAP_SYS_CHROOT"} and caps <= ALLOWED_CAPS
    assert not ALLOWED_CAPS & {"CAP_SYS_ADMIN", "CAP_SYS_PTRACE", "CAP_SYS_MODULE", "CAP_NET_ADMIN", "CAP_MKNOD"}
    assert argv[argv.index("--cap-drop") + 1] == "ALL"

    spec["process"]["user"] = {"uid": 1234, "gid": 1234}
    user_argv = bwrap_argv(spec, [str(build)], lambda path: path)
    assert "--cap-add" not in user_argv and "--disable-userns" in user_argv
    assert user_argv[user_argv.index("--uid") + 1] == "1234"

    for source in ("/etc", "/", str(build / ".." / "elsewhere"), "relative/path"):
        bad = dict(spec, mounts=[{"destination": "/mnt", "type": "bind", "source": source, "options": ["rbind"]}])
        with pytest.raises(StepError, match="outside the build's folders"):
            bwrap_argv(bad, [str(build)], lambda path: path)
    with pytest.raises(StepError, match="outside the build's folders"):
        bwrap_argv(dict(spec, root={"path": "/"}), [str(build)], lambda path: path)


@needs_buildah
def test_a_user_step_runs_as_that_user_without_capabilities_and_keeps_its_files_owners(standin_buildah):
    """A RUN after USER runs in the step sandbox as that uid (bwrap's user namespace mapping it to
    itself): the files it makes belong to it in the image, it holds no capability, it cannot write
    what root owns; a root step's files stay root's."""
    from termforge.images.dockerfile import build_dockerfile

    _fails, _buds, context = standin_buildah
    ctx = context("RUN useradd -u 1234 app && mkdir /data && chown app:app /data && touch /rootfile\n"
                  "USER app\n"
                  "RUN id -u > /data/uid && touch /data/mine && grep CapEff /proc/self/status > /data/caps && "
                  "(touch /rootfile 2>/dev/null && echo wrote || echo denied) > /data/root_write\n")
    built = build_dockerfile(ctx, ctx / "Dockerfile", ensure_task_base("debian:bookworm-slim", [], None),
                             log=lambda _m: None)
    data = built.rootfs / "data"
    assert (data / "uid").read_text() == "1234\n"
    assert (data / "caps").read_text().split() == ["CapEff:", "0000000000000000"]
    assert (data / "root_write").read_text() == "denied\n"
    assert (data / "mine").stat().st_uid == 1234 and (built.rootfs / "rootfile").stat().st_uid == 0
