"""Dockerfiles as Harbor tasks write them, built by buildah and run natively: multi-stage builds,
COPY --from a stage or an image, heredocs, WORKDIR and COPY anywhere, ARG, USER. Each form is a
small Harbor task whose oracle scores 1 and whose no-op scores 0 (docs/terminal-bench.md)."""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

import pytest

from conftest import needs_bwrap
from termforge.evals.harbor_tasks import (EnvironmentUnsupported, build_harbor_image, buildah_dockerfile,
                                          load_harbor_task, plan_dockerfile, start_harbor_session)
from termforge.evals.tbench import noop_agent, oracle_agent, run_native
from termforge.runtime import rootlayer
from termforge.runtime.base import Limits
from termforge.runtime.bwrap import default_work_root, tree_digest

LIMITS = Limits(wall_sec=60, cpu_sec=60, memory_mb=1024, max_procs=64, max_file_mb=32, disk_mb=64, tmp_mb=32)
TASK_TOML = '[verifier]\ntimeout_sec = 120.0\n\n[agent]\ntimeout_sec = 120.0\n\n[environment]\nbuild_timeout_sec = 600.0\n'


def harbor_task(root: Path, name: str, dockerfile: str, solve: str, expected: str, files: dict | None = None) -> Path:
    """A Harbor task whose verifier passes when /app/answer.txt holds `expected` exactly."""
    d = root / name
    for rel, text in {"instruction.md": f"Write the answer of {name} to /app/answer.txt.\n", "task.toml": TASK_TOML,
                      "environment/Dockerfile": dockerfile, "solution/solve.sh": f"#!/bin/bash\nset -e\n{solve}\n",
                      "tests/expected.txt": expected + "\n",
                      "tests/test.sh": ("#!/bin/bash\nif cmp -s /tests/expected.txt /app/answer.txt; then echo 1 > "
                                        "/logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n"),
                      **{f"environment/{k}": v for k, v in (files or {}).items()}}.items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_text(text)
    return d


# name -> (Dockerfile, solve.sh, the answer, build context files)
FORMS = {
    # Two stages: the tool is made in one and copied into the other, which never ran its RUN.
    "multi-stage": (
        "FROM debian:bookworm-slim AS build\nRUN mkdir -p /out && printf '#!/bin/sh\\necho made-in-build\\n' > "
        "/out/tool && chmod 755 /out/tool\n"
        "FROM debian:bookworm-slim\nCOPY --from=build /out/tool /usr/local/bin/tool\nWORKDIR /app\n",
        "tool > /app/answer.txt", "made-in-build", {}),
    # COPY --from an image (not a stage) and --from a stage by index.
    "copy-from-image": (
        "FROM debian:bookworm-slim\nRUN echo stage-zero > /zero.txt\n"
        "FROM debian:bookworm-slim\nCOPY --from=debian:bookworm-slim /etc/debian_version /srv/debian_version\n"
        "COPY --from=0 /zero.txt /srv/zero.txt\nWORKDIR /app\n",
        "cat /srv/zero.txt > /app/answer.txt; [ -s /srv/debian_version ] && echo has-version >> /app/answer.txt",
        "stage-zero\nhas-version", {}),
    # RUN and COPY here-documents, one with its own interpreter line.
    "heredoc": (
        "FROM debian:bookworm-slim\nRUN <<EOF\nmkdir -p /opt/h\necho run-heredoc > /opt/h/a\nEOF\n"
        "RUN <<'EOF'\n#!/bin/sh\necho \"shebang $0\" | cut -c1-7 > /opt/h/b\nEOF\n"
        "RUN cat > /opt/h/c <<EOF\ncat-heredoc\nEOF\n"
        "COPY <<EOF /srv/conf.txt\nkey=value\nEOF\nWORKDIR /app\n",
        "cat /opt/h/a /opt/h/b /opt/h/c /srv/conf.txt > /app/answer.txt",
        "run-heredoc\nshebang\ncat-heredoc\nkey=value", {}),
    # WORKDIR and COPY outside /app (Harbor tasks use /root, /srv, /opt): the session starts there.
    "workdir-anywhere": (
        "FROM debian:bookworm-slim\nCOPY data.txt /opt/data/\nCOPY data.txt /root/data.txt\nWORKDIR /srv/work\n"
        "COPY data.txt ./\n",
        "{ pwd; cat data.txt /opt/data/data.txt /root/data.txt; } > /app/answer.txt",
        "/srv/work\nd1\nd1\nd1", {"data.txt": "d1\n"}),
    # ARG with defaults, before FROM and redeclared in the stage, and one with no value.
    "arg": (
        "ARG BASE=debian:bookworm-slim\nARG GREETING=global-arg\nFROM ${BASE}\nARG GREETING\nARG LOCAL=local-arg\n"
        "ARG UNSET\nRUN echo \"$GREETING $LOCAL [$UNSET]\" > /opt/args.txt\nWORKDIR /app\n",
        "cat /opt/args.txt > /app/answer.txt", "global-arg local-arg []", {}),
    # USER: build steps after it and the session run as that user.
    "user": (
        "FROM debian:bookworm-slim\nRUN useradd -m -u 1234 builder\nUSER builder\nWORKDIR /home/builder/w\n"
        "RUN id -un > /home/builder/w/built-by\nWORKDIR /app\n",
        "{ id -un; cat /home/builder/w/built-by; } > /app/answer.txt", "builder\nbuilder", {}),
}


def test_every_form_plans_and_the_buildah_dockerfile_keeps_it(tmp_path):
    """The planner accepts each form (naming the images to put in the build's storage), and what
    buildah reads is the Dockerfile with those images renamed and heredocs as shell steps."""
    for name, (dockerfile, _solve, _answer, files) in FORMS.items():
        d = harbor_task(tmp_path, name, dockerfile, "true", "x", files)
        plan = plan_dockerfile(d / "environment" / "Dockerfile", d / "environment")
        assert plan.base_image == "debian:bookworm-slim", name
        text = buildah_dockerfile(plan, {"debian:bookworm-slim": "localhost/termforge-base:k"})
        assert "FROM debian" not in text and "<<EOF\nmkdir" not in text, (name, text)
        assert (plan.canonical_blocker is None) == (name == "arg"), (name, plan.canonical_blocker)
    heredoc = plan_dockerfile(tmp_path / "heredoc" / "environment" / "Dockerfile", tmp_path / "heredoc" / "environment")
    assert "heredoc" in heredoc.canonical_blocker
    copy = plan_dockerfile(tmp_path / "copy-from-image" / "environment" / "Dockerfile",
                           tmp_path / "copy-from-image" / "environment")
    assert "--from=localhost/termforge-base:k" in buildah_dockerfile(copy, {"debian:bookworm-slim":
                                                                            "localhost/termforge-base:k"})
    assert "--from=0" in buildah_dockerfile(copy, {"debian:bookworm-slim": "localhost/termforge-base:k"})


@pytest.mark.parametrize("dockerfile, needle", [
    ("FROM debian:bookworm-slim AS a\nFROM scratch\nCOPY --from=a / /\n", "final stage builds FROM scratch"),
    ("FROM debian:bookworm-slim\nRUN --mount=type=secret,id=tok cat /run/secrets/tok\n", "no secrets or ssh"),
    ("FROM debian:bookworm-slim\nRUN <<EOF\necho never closed\n", "has no closing EOF line"),
    ("FROM debian:bookworm-slim\nCOPY --from=alpine:3.19 /etc/os-release /x\n", "COPY --from=alpine:3.19: base image"),
])
def test_what_cannot_be_built_is_one_line_naming_it(tmp_path, dockerfile, needle):
    (tmp_path / "Dockerfile").write_text(dockerfile)
    with pytest.raises(EnvironmentUnsupported) as err:
        plan_dockerfile(tmp_path / "Dockerfile", tmp_path)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_fetching_steps_are_refused_only_for_an_offline_build(tmp_path):
    (tmp_path / "Dockerfile").write_text("FROM debian:bookworm-slim\nRUN pip install requests\n"
                                         "RUN curl -fsSL https://example.org/x | sh\n")
    assert plan_dockerfile(tmp_path / "Dockerfile", tmp_path).canonical_blocker
    with pytest.raises(EnvironmentUnsupported, match="pip install needs network at build time"):
        plan_dockerfile(tmp_path / "Dockerfile", tmp_path, network=False)


@needs_bwrap
@pytest.mark.parametrize("form", sorted(FORMS))
def test_each_dockerfile_form_scores_oracle_1_and_noop_0(form, tmp_path):
    dockerfile, solve, answer, files = FORMS[form]
    task = load_harbor_task(harbor_task(tmp_path / "tasks", form, dockerfile, solve, answer, files))
    scores = {}
    for name, agent in (("oracle", oracle_agent), ("noop", noop_agent)):
        res = run_native([task], agent, 1, tmp_path / "images", tmp_path / name)
        trial = res.trials[0]
        assert trial.exception_type is None, (form, name, trial)
        scores[name] = trial.reward
    assert scores == {"oracle": 1.0, "noop": 0.0}, form


# -- the image's filesystem as the container's writable layer ------------------------------------

WRITES = "echo srv > /srv/x; echo root > /root/y; echo etc > /etc/tf-conf; rm /etc/debian_version"


@needs_bwrap
def test_the_agent_and_verifier_write_anywhere_in_the_image(tmp_path):
    """Under Docker the container's root is writable: an oracle that writes /srv, /root and /etc
    (and removes an image file) scores 1, the no-op 0; the verifier sees what the agent wrote."""
    d = harbor_task(tmp_path / "tasks", "writes-anywhere", "FROM debian:bookworm-slim\nWORKDIR /app\n",
                    WRITES, "unused")
    (d / "tests" / "test.sh").write_text(
        "#!/bin/bash\nif [ \"$(cat /srv/x /root/y /etc/tf-conf)\" = \"$(printf 'srv\\nroot\\netc')\" ] && "
        "[ ! -e /etc/debian_version ]; then echo 1 > /logs/verifier/reward.txt; "
        "else echo 0 > /logs/verifier/reward.txt; fi\n")
    task = load_harbor_task(d)
    for name, agent, reward in (("oracle", oracle_agent, 1.0), ("noop", noop_agent, 0.0)):
        trial = run_native([task], agent, 1, tmp_path / "images", tmp_path / name).trials[0]
        assert (trial.exception_type, trial.reward) == (None, reward), (name, trial)


@pytest.fixture
def work():
    """A work root the sessions' own uids can enter (where sessions put their trees by default)."""
    path = Path(tempfile.mkdtemp(prefix="tf-test-work-", dir=default_work_root()))
    path.chmod(0o711)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def built_image(tmp_path):
    d = harbor_task(tmp_path / "tasks", "plain", "FROM debian:bookworm-slim\nWORKDIR /app\n", "true", "x")
    built = build_harbor_image(load_harbor_task(d), tmp_path / "images")
    assert built.ok, built.reason
    return built.image


@needs_bwrap
@pytest.mark.skipif(not rootlayer.available(), reason="a writable root needs a root host (mounts)")
def test_a_sessions_writes_never_reach_the_image_or_another_session(built_image, work):
    before = tree_digest(Path(built_image.rootfs))
    first = start_harbor_session(built_image, LIMITS, work)
    second = start_harbor_session(built_image, LIMITS, work)
    try:
        res = first.exec(WRITES + "; echo more >> /etc/hosts; cat /srv/x /root/y")
        assert res.ok and res.stdout.split() == ["srv", "root"], res.stderr
        seen = second.exec("for f in /srv/x /root/y /etc/tf-conf; do [ -e $f ] && echo LEAK $f; done; "
                           "cat /etc/debian_version; grep -c more /etc/hosts || true", cwd="/")
        assert seen.ok and seen.stdout.split()[-1] == "0" and "LEAK" not in seen.stdout and \
            re.match(r"\d", seen.stdout), seen.stdout + seen.stderr
    finally:
        first.stop()
        second.stop()
    assert tree_digest(Path(built_image.rootfs)) == before, "a session wrote the image in the cache"
    assert not first.cleanup_problems and not any(work.iterdir()), "a session's tree or mount was left"


@needs_bwrap
@pytest.mark.skipif(not rootlayer.available(), reason="a writable root needs a root host (mounts)")
@pytest.mark.parametrize("place", ["/opt/fill", "/root", "/usr/share/fill"])
def test_writing_past_disk_mb_anywhere_in_the_root_hits_the_cap(built_image, work, place):
    """An attack: files of 8 MiB (under the file-size limit) written past disk_mb into the image's
    own directories; the one disk cap counts the overlay's upper layer and kills the sandbox."""
    session = start_harbor_session(built_image, LIMITS, work)
    try:
        res = session.exec(f"mkdir -p {place}; for i in $(seq {LIMITS.disk_mb // 2}); do dd if=/dev/zero "
                           f"of={place}/.fill$i bs=1M count=8 2>/dev/null || break; done; echo filled", timeout=60)
        assert res.limit_hit and "disk" in res.limit_hit, (place, res.stdout[-300:], res.stderr[-300:])
    finally:
        session.stop()


@pytest.mark.skipif(not rootlayer.available(), reason="a writable root needs a root host (mounts)")
def test_the_idmapping_namespace_comes_from_an_execd_helper_every_time():
    """The embedded run's eval process (torch loaded, a persistent shell, slirp4netns) had every
    session after its first refused with EINVAL when it forked itself to unshare the namespace:
    tb-mini's oracle scored 0/6 as environment errors. The namespace is now made by an exec'd
    `unshare`, so nothing of the calling process can refuse it; each call gives a new namespace
    with the mapping asked for."""
    import os

    fds = [rootlayer._userns_fd((inner, inner), os.getuid()) for inner in (0, 1000, 0)]
    try:  # all three held open at once, so their namespaces are distinct (no inode reused)
        links = [os.readlink(f"/proc/self/fd/{fd}") for fd in fds]
        assert all(link.startswith("user:[") for link in links)
        assert len(set(links)) == 3 and os.readlink("/proc/self/ns/user") not in links
    finally:
        for fd in fds:
            os.close(fd)
