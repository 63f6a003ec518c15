"""Dockerfile builds: a real `buildah bud` from the local image store, the result turned into a
root filesystem the bwrap runtime runs on (docs/images.md, "Dockerfile builds").

    build_dockerfile(context, dockerfile, base, text=..., others=[...], network=...) -> DockerfileImage

1. `base` is the built termforge base the Dockerfile's (final stage's) FROM resolved to (a declared
   base, or an image of the store, plus a derived base holding the Debian packages its `apt-get
   install` lines name: termforge.images.ensure_task_base); `others` the other stages' and COPY
   --from images'. The store holds each as an OCI image; each is copied once into the image
   cache's overlay containers-storage (`<cache>/buildah`, shared by every build) under
   localhost/termforge-base:<key>, which the FROM lines of `text` name (without `text`, buildah's
   `--from` puts `base` in place of the first FROM), so nothing is pulled.
2. buildah runs `bud --isolation oci --runtime <the step sandbox> --pull=never` as root of a user
   namespace mapped to the subordinate ids of /etc/subuid, always in a network namespace of the
   build's own (`unshare --net`): with `network`, slirp4netns connects it to the outside (NAT, the
   host's loopback and abstract sockets out of reach: runtime.process.PublicNetwork; buildah's
   `--network host` then means that namespace, where RUN steps and ADD of a URL fetch, and each RUN
   step gets the host's CA bundle bound read-only over the image's), else it has nothing in it
   (`--network none`).
   RUN steps are task code: each runs in termforge.images.step_sandbox (bwrap pivot_rooted into
   the working container, nothing of the host), never in buildah's chroot, which a double chroot
   leaves. Offline, `apt-get update` fails softly and `apt-get install` finds its packages already
   installed (they are in the derived base), so a Terminal-Bench Dockerfile builds unchanged.
3. The built image is pushed to an OCI layout; its first layers must be the base's. The root
   filesystem is the base's, hard-linked from the image cache, with only the build's own layers
   applied over it (termforge.images.layers: whiteouts honoured, every touched file replaced,
   never written through a link), then finished as every base is (sandbox user, mount points).
4. Content-addressed: the Dockerfile, the build context and the base's digest make the key;
   `<image cache>/dockerfile/<key>/` holds rootfs/, build.json (config, layers, digest, timings)
   and build.log, published by a rename, so a second run (any results folder) does not rebuild.

A failure of the Dockerfile's (a RUN step that exits non-zero, a timeout) is a
DockerfileError whose message ends with the tail of buildah's log: the caller turns it into an
environment error. A failure of the builder's own (failure_owner) is tried again, BUILD_ATTEMPTS
in all, then is a BuilderError naming buildah: an infrastructure error, not the task's (as is
a missing tool or subordinate id range).
"""

from __future__ import annotations

import json
import os
import pwd
import re
import select
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from termforge.errors import TermforgeError
from termforge.images.declarations import SCRIPTS_DIR
from termforge.io import atomic_write_json, atomic_write_text, stable_hash
from termforge.runtime.process import NETWORK_UP_SEC, SLIRP_DNS, PublicNetwork

# Bump when what a build produces changes: every build is redone.
BUILDER = "termforge-buildah-2"
BUILD_TIMEOUT_SEC = 1800
# Host ids a build's user namespace maps root to (scripts/setup.sh writes /etc/subuid).
SUBID_COUNT = 65536
# Files finish_rootfs rewrites in place: unshared from the base before it runs.
REWRITTEN = ("etc/hostname", "etc/hosts", "etc/resolv.conf", "etc/machine-id", "etc/passwd", "etc/group")
LOG_TAIL_LINES = 15

# A Dockerfile build in the build's user namespace, without network (images/scripts/).
BUILD_SCRIPT = (SCRIPTS_DIR / "buildah-build.sh").read_text()
# How the step sandbox is started (python3 -I: the standard library only, nothing of the caller's).
STEP_RUNTIME = """#!/bin/sh
exec {python} -I {program} --root={steps} --allow={work} --allow={storage} --bwrap={bwrap} --records={records} --net={net} --ca={ca} "$@"
"""
# The host's CA bundle, bound read-only over the image's in every RUN step of a build given network
# (a TLS-intercepting proxy's root is often only there); the first that exists.
HOST_CA_BUNDLES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem")
# Failures of the builder's own making (the kernel, the storage, buildah itself) when buildah's final
# error is not about a RUN step: a Dockerfile cannot cause these, a retry may clear them.
_BUILDER_SIGNS = re.compile(r"device or resource busy|resource temporarily unavailable|sealing memfd|database is locked|"
                            r"\block(ing|ed)?\b|no space left on device|too many open files|cannot allocate memory|"
                            r"interrupted system call|input/output error", re.IGNORECASE)
_WORDS = re.compile(r"[^\s\"':,;=()\[\]{}<>/]+")
# A build that fails for the builder's own reason is tried this many times in all.
BUILD_ATTEMPTS = 3
RETRY_PAUSE_SEC = 2.0


class DockerfileError(TermforgeError):
    """A Dockerfile that did not build here: an environment error; the message says why."""


class BuilderError(DockerfileError):
    """The builder (buildah, its storage, the step sandbox) failed for a reason of its own, on every
    try: an infrastructure error, never a verdict on the Dockerfile."""


class _BuilderFailed(Exception):
    """One try failed for the builder's own reason (a retry may succeed)."""

    def __init__(self, detail: str):
        super().__init__(detail)
        self.detail = detail


@dataclass
class DockerfileImage:
    """A built Dockerfile in the image cache."""

    dir: Path
    record: dict

    @property
    def key(self) -> str:
        return self.record["key"]

    @property
    def rootfs(self) -> Path:
        return self.dir / "rootfs"

    @property
    def digest(self) -> str:
        """The built image's manifest digest."""
        return self.record["manifest_digest"]

    @property
    def workdir(self) -> str:
        return self.record["config"].get("WorkingDir") or ""

    @property
    def env(self) -> dict:
        """The ENV the Dockerfile added (the base image's own Env left out)."""
        base = set(self.record.get("base_env") or [])
        out = {}
        for item in self.record["config"].get("Env") or []:
            if item not in base:
                key, _, value = item.partition("=")
                out[key] = value
        return out


def _cache_dir(cache) -> Path:
    from termforge.images.store import image_cache_dir

    return image_cache_dir(cache) / "dockerfile"


def find_built(key: str, cache=None) -> DockerfileImage | None:
    d = _cache_dir(cache) / key
    if not (d / "build.json").is_file():
        return None
    return DockerfileImage(d, json.loads((d / "build.json").read_text()))


def build_key(dockerfile_text: str, context: Path, base_digest: str) -> str:
    from termforge.runtime.bwrap import tree_digest

    return stable_hash([BUILDER, dockerfile_text, tree_digest(context), base_digest], 24)


def subid_range(kind: str = "uid") -> tuple[int, int] | None:
    """The caller's subordinate id range from /etc/subuid or /etc/subgid: (first, count)."""
    names = {str(os.getuid())}
    try:
        names.add(pwd.getpwuid(os.getuid()).pw_name)
    except KeyError:
        pass
    try:
        lines = Path(f"/etc/sub{kind}").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.strip().split(":")
        if len(parts) == 3 and parts[0] in names and parts[1].isdigit() and parts[2].isdigit() \
                and int(parts[2]) >= SUBID_COUNT:
            return int(parts[1]), int(parts[2])
    return None


def _userns() -> tuple[list[str], tuple[int, int] | None]:
    """unshare's options for the build's user namespace, and the host ids its root maps to."""
    if os.geteuid() != 0:
        return ["--user", "--map-root-user"], None
    uids, gids = subid_range("uid"), subid_range("gid")
    if not uids or not gids:
        raise BuilderError(
            f"Dockerfile builds run as root of a user namespace mapped to subordinate ids, and /etc/subuid or "
            f"/etc/subgid gives uid {os.getuid()} no range of {SUBID_COUNT}; add one, e.g. "
            f"`echo root:1500000:{SUBID_COUNT} | tee -a /etc/subuid /etc/subgid` (scripts/setup.sh does)")
    return ["--user", f"--map-users={uids[0]},0,{SUBID_COUNT}", f"--map-groups={gids[0]},0,{SUBID_COUNT}",
            "--setuid", "0", "--setgid", "0"], (uids[0], gids[0])


def check_tools() -> dict[str, str]:
    """The programs a build runs, by absolute path (looked up on the caller's PATH)."""
    tools = {}
    for tool in ("buildah", "skopeo", "unshare", "bwrap"):
        found = shutil.which(tool)
        if found is None:
            raise BuilderError(f"Dockerfile builds need {tool}, which is not installed (scripts/setup.sh "
                                  "installs it)")
        tools[tool] = os.path.abspath(found)
    tools["python"] = _step_python()
    return tools


def _searchable(path: str) -> bool:
    """Whether a user other than the owner can reach and run `path` (the build's namespace root is
    an unprivileged uid of the host)."""
    p = Path(path)
    try:
        return all(q.stat().st_mode & 0o001 for q in [p, *p.parents])
    except OSError:
        return False


def _step_python() -> str:
    """A Python the build's namespace root can run for the step sandbox (standard library only):
    this one when others can reach it, else the system's."""
    candidates = [os.path.realpath(sys.executable), shutil.which("python3") or "", "/usr/bin/python3"]
    for candidate in candidates:
        if candidate and os.path.isfile(candidate) and (os.geteuid() != 0 or _searchable(os.path.realpath(candidate))):
            return os.path.realpath(candidate)
    raise BuilderError(f"Dockerfile builds run their steps with a python3 that other users can run; none of "
                          f"{[c for c in candidates if c]} is (install Debian's python3)")


def build_dockerfile(context: str | os.PathLike, dockerfile: str | os.PathLike, base, *,
                     timeout: float = BUILD_TIMEOUT_SEC, cache=None, log: Callable[[str], None] = print,
                     what: str = "", text: str | None = None, others=(), network: bool = False) -> DockerfileImage:
    """Build `dockerfile` with `context` on `base` (a termforge.images BuiltBase); the cached build
    when the same Dockerfile, context and bases were built before. `text`: the Dockerfile as
    buildah is to read it, every FROM naming its base as localhost/termforge-base:<key> (then
    `base` is the final stage's, `others` the other stages' and COPY --from images', all put in
    the build's storage); None: `dockerfile` as written, its first FROM replaced by `base`.
    `network`: the build gets network (a namespace of its own connected by slirp4netns, as `docker
    build`'s bridge) and RUN steps the host's CA bundle; else none."""
    from termforge.images.build import _check_reachable, _locked, _mkdirs

    context, dockerfile = Path(context), Path(dockerfile)
    rewritten = text is not None
    text = text if rewritten else dockerfile.read_text(encoding="utf-8")
    # The base's key as well as its layer: a store image's config (Env, WorkingDir...) is part of
    # what the build inherits, and the key changes with it where the layer does not.
    key = build_key(text, context, " ".join([f"{b.digest} {b.key}" for b in [base, *others]]
                                            + (["rewritten"] if rewritten else []) + (["network"] if network else [])))
    found = find_built(key, cache)
    if found:
        return found
    tools = check_tools()
    root = _cache_dir(cache)
    _mkdirs(root)
    try:
        _check_reachable(root)  # the build's namespace root is an unprivileged uid of the host too
    except TermforgeError as exc:
        raise BuilderError(str(exc)) from None
    what = what or str(context)
    with _locked(root.parent / "locks" / f"dockerfile-{key}.lock", f"the Dockerfile of {what}", log):
        found = find_built(key, cache)
        if found:
            return found
        for stale in [*root.glob(f".stage-{key}-*"), *root.glob(f"tf-buildah-{key[:8]}-*")]:  # killed builds
            shutil.rmtree(stale, ignore_errors=True)
        for attempt in range(1, BUILD_ATTEMPTS + 1):
            stage = root / f".stage-{key}-{os.getpid()}"
            stage.mkdir()
            try:
                built = _build(text, context, [base, *others], key, stage, cache, timeout, log, what, tools,
                               rewritten, network)
                os.rename(stage, root / key)
                break
            except _BuilderFailed as exc:
                if attempt == BUILD_ATTEMPTS:
                    raise BuilderError(
                        f"the builder (buildah {tools['buildah']}, {BUILDER}) failed on the Dockerfile of {what} "
                        f"{BUILD_ATTEMPTS} times for its own reason, not the Dockerfile's (an infrastructure "
                        f"error); the last failure:\n{exc.detail}") from None
                log(f"images: the builder failed on the Dockerfile of {what} for its own reason (try {attempt} "
                    f"of {BUILD_ATTEMPTS}), trying again: {exc.detail.splitlines()[-1] if exc.detail else ''}")
                time.sleep(RETRY_PAUSE_SEC * attempt)
            finally:
                shutil.rmtree(stage, ignore_errors=True)
        built.dir = root / key
    return built


def _base_layout(base, cache, dest: Path) -> tuple[str, dict]:
    """The base as the image store holds it (ensure_base registered it), copied into its own OCI
    layout at `dest` (blobs hard-linked), where the build's namespace can read it wherever the
    store lies: its oci: reference there and its config."""
    from termforge.images.store import ImageStore, image_store_dir, register_base

    store = ImageStore(image_store_dir(None, cache))
    image = store.find_label("org.termforge.base.key", base.key)
    if image is None:
        image = register_base(base, store)[0]
    ImageStore(dest).copy_image(store, image.name, as_name="base")
    for d in (dest, *dest.rglob("*")):
        if d.is_dir():
            os.chmod(d, 0o755)
    return f"oci:{dest}:base", image.config


def _build(text: str, context: Path, bases: list, key: str, stage: Path, cache, timeout: float,
           log: Callable[[str], None], what: str, tools: dict[str, str], rewritten: bool,
           network: bool) -> DockerfileImage:
    from termforge.containment import copy_regular_tree
    from termforge.errors import InputError

    start = time.monotonic()
    base = bases[0]
    userns, owner = _userns()
    work = Path(tempfile.mkdtemp(prefix=f"tf-buildah-{key[:8]}-", dir=stage.parent))
    try:
        try:
            # A copy the namespace's root can read (the dataset may sit where only the caller can),
            # which the build cannot change under the caller either.
            copy_regular_tree(context, work / "context")
        except InputError as exc:
            raise DockerfileError(f"the build context {context}: {exc.problem}") from None
        (work / "Dockerfile").write_text(text)
        (work / "policy.json").write_text('{"default":[{"type":"insecureAcceptAnything"}]}')
        layout = work / "out"
        (layout / "blobs" / "sha256").mkdir(parents=True)
        (layout / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
        (layout / "index.json").write_text('{"schemaVersion": 2, "manifests": []}')
        (work / "home").mkdir()
        storage = stage.parent.parent / "buildah"
        for sub in ("root", "run"):
            (storage / sub).mkdir(parents=True, exist_ok=True)
        # The step sandbox is copied in: the namespace's root runs it wherever the package lies.
        shutil.copyfile(Path(__file__).with_name("step_sandbox.py"), work / "step_sandbox.py")
        (work / "steps").mkdir()
        ca = next((Path(c) for c in HOST_CA_BUNDLES if os.path.isfile(c)), None) if network else None
        if ca is not None:
            shutil.copyfile(ca, work / "ca.crt")  # in the build's folders, where the step sandbox binds from
        runtime = work / "step-runtime"
        runtime.write_text(STEP_RUNTIME.format(**{k: shlex.quote(str(v)) for k, v in {
            "python": tools["python"], "program": work / "step_sandbox.py", "steps": work / "steps", "work": work,
            "storage": storage.resolve(), "bwrap": tools["bwrap"], "records": work / "steps.jsonl",
            "net": "host" if network else "none", "ca": work / "ca.crt" if ca else ""}.items()}))
        runtime.chmod(0o755)
        if owner:
            subprocess.run(["chown", "-R", f"{owner[0]}:{owner[1]}", str(work)], check=True, capture_output=True)
            os.chown(storage, *owner)
            for sub in ("root", "run"):
                os.chown(storage / sub, *owner)
        # Linked after the chown (which would otherwise reach the store's blobs through the links).
        _link(base.layer, _blob(layout, base.digest))
        pairs: list[str] = []
        for i, b in enumerate(bases):
            ref, config = _base_layout(b, cache, work / f"base-{i}")
            if i == 0:
                base_config = config
            pairs += [ref, f"localhost/termforge-base:{b.key}"]
        tag = f"localhost/termforge-build:{key}"
        # --mount-proc: RUN steps see the build's own pid namespace in /proc, not the host's processes.
        # A network namespace of the build's own, with nothing in it, or (network) connected by
        # slirp4netns: never the host's, whose 127.0.0.1 services and abstract sockets a RUN step
        # (or buildah fetching an ADD URL the Dockerfile names) would otherwise reach.
        if network:
            (work / "resolv.conf").write_text(f"nameserver {SLIRP_DNS}\n")
            if owner:
                os.chown(work / "resolv.conf", *owner)
        argv = [tools["unshare"], *userns, "--net", "--mount", "--pid", "--fork",
                "--kill-child", "--mount-proc", "bash", "-c", BUILD_SCRIPT, "build", str(work), str(storage), tag,
                tools["buildah"], tools["skopeo"], "host" if network else "none",
                "" if rewritten else f"localhost/termforge-base:{base.key}", *pairs]
        log(f"images: building the Dockerfile of {what} with buildah ({'with network' if network else 'offline'}) ...")
        output = _run_build(argv, work, timeout, what, text, network)
        atomic_write_text(stage / "build.log", output)
        index = json.loads((layout / "index.json").read_text())
        if not index.get("manifests"):
            raise _BuilderFailed(f"buildah pushed no image for {what}; its log ends:\n{log_tail(output)}")
        manifest = json.loads(_blob(layout, index["manifests"][0]["digest"]).read_bytes())
        config = json.loads(_blob(layout, manifest["config"]["digest"]).read_bytes())
        diff_ids = (config.get("rootfs") or {}).get("diff_ids", [])
        if not diff_ids or diff_ids[0] != base.digest:
            raise DockerfileError(f"the build of {what} does not start from its base's layer {base.digest[:19]}")
        rootfs = stage / "rootfs"
        _materialize(layout, manifest, base.rootfs, rootfs)
        from termforge.images.build import finish_rootfs

        finish_rootfs(rootfs)
        os.chmod(rootfs, 0o755)
        record = {
            "key": key, "builder": BUILDER, "what": what,
            "base": base.ref(), "base_env": list((base_config.get("config") or {}).get("Env") or []),
            "config": {k: v for k, v in (config.get("config") or {}).items()
                       if k in ("Env", "WorkingDir", "User", "Entrypoint", "Cmd", "Labels")},
            "diff_ids": diff_ids, "manifest_digest": index["manifests"][0]["digest"],
            "added_bytes": sum(layer.get("size", 0) for layer in manifest["layers"][1:]),
            "build_seconds": round(time.monotonic() - start, 1),
        }
        atomic_write_json(stage / "build.json", record)
        os.chmod(stage, 0o755)
        log(f"images: built the Dockerfile of {what} in {record['build_seconds']:.1f}s "
            f"({record['added_bytes'] / 1e6:.1f} MB over base {base.record['name']})")
        return DockerfileImage(stage, record)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run_build(argv: list[str], work: Path, timeout: float, what: str, dockerfile_text: str,
               network: bool = False) -> str:
    """buildah's log. A failure is a DockerfileError when it is the Dockerfile's (failure_owner),
    else _BuilderFailed (the caller tries again). `network`: the build's namespace is connected
    by slirp4netns before the script does anything (it says it is up on one descriptor and waits
    for the go on another, TF_BUILD_NET_FDS),
    and slirp4netns is ended and reaped with the build, however it ends."""
    net = PublicNetwork() if network else None  # no slirp4netns: one line naming it, never the host's network
    try:
        return _run_build_in(argv, work, timeout, what, dockerfile_text, net)
    finally:
        if net is not None:
            net.close()


def _run_build_in(argv: list[str], work: Path, timeout: float, what: str, dockerfile_text: str,
                  net: PublicNetwork | None) -> str:
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(work / "home"),
           "XDG_RUNTIME_DIR": str(work / "home"), "LC_ALL": "C.UTF-8", "TMPDIR": str(work / "home"),
           "BUILDAH_ISOLATION": "oci"}
    fds = {}
    if net is not None:
        go_r, go_w = os.pipe()
        up_r, up_w = os.pipe()
        fds = {"go_r": go_r, "go_w": go_w, "up_r": up_r, "up_w": up_w}
        # The script's descriptors: where it says it is up, where it waits for the go.
        env["TF_BUILD_NET_FDS"] = f"{up_w} {go_r}"

    try:
        try:
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=env, start_new_session=True,
                                    pass_fds=(fds["go_r"], fds["up_w"]) if fds else ())
        except OSError as exc:
            raise _BuilderFailed(f"cannot start buildah: {exc}") from None
        finally:
            for name in ("go_r", "up_w"):
                if name in fds:
                    os.close(fds.pop(name))
        if net is not None:
            _connect_build(proc, net, fds)
    finally:
        for fd in fds.values():
            os.close(fd)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise DockerfileError(f"the build of {what} ran past its {timeout:.0f}s (build_timeout_sec); buildah's "
                              f"log ends:\n{log_tail(out.decode(errors='replace'))}") from None
    text = out.decode(errors="replace")
    if proc.returncode != 0:
        message = f"buildah could not build {what} (exit {proc.returncode}); its log ends:\n{log_tail(text)}"
        if failure_owner(text, read_step_records(work / "steps.jsonl"), dockerfile_text) == "dockerfile":
            raise DockerfileError(message)
        raise _BuilderFailed(message)
    return text


def _connect_build(proc: subprocess.Popen, net: PublicNetwork, fds: dict) -> None:
    """Once the script runs inside the build's namespaces (it said so), connect the network
    namespace unshare made (the unshare process is in it) and let the script go on."""
    ready, _, _ = select.select([fds["up_r"]], [], [], NETWORK_UP_SEC)
    try:
        if not ready or not os.read(fds["up_r"], 16):
            raise _BuilderFailed("the build's namespaces did not come up (unshare failed)")
        net.attach(proc.pid)
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    os.write(fds["go_w"], b"go\n")


def read_step_records(path: Path) -> list[dict]:
    """What the step sandbox recorded of each RUN step: did its command start, how did it end."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return []
    records = []
    for line in lines:
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if isinstance(item, dict):
            records.append(item)
    return records


def failure_owner(output: str, steps: list[dict], dockerfile_text: str = "") -> str:
    """Whose a failed build is: "dockerfile" or "builder".

    A RUN step is the Dockerfile's exactly when the step sandbox ran its command and saw it end
    non-zero (the sandbox's own record says so, not the log the step writes to); a RUN step buildah
    failed at whose command never ran, or ended well, is the builder's. Otherwise buildah's final
    error decides: the builder's when there is none (buildah died or crashed) or it is of a kind a
    Dockerfile cannot cause (_BUILDER_SIGNS: a busy device, a lock, no space), read with every word
    the Dockerfile holds taken out (a COPY of a file named "lock" is still the Dockerfile's); else
    the Dockerfile's (a COPY of a missing file, a bad instruction, an unknown FROM)."""
    if any(step.get("started") and step.get("exit") != 0 for step in steps):
        return "dockerfile"
    errors = [ln for ln in output.splitlines() if ln.startswith("Error: ")]
    if not errors or errors[-1].startswith('Error: building at STEP "RUN '):
        return "builder"
    own = set(_WORDS.findall(dockerfile_text))
    said = " ".join(w for w in _WORDS.findall(errors[-1]) if w not in own)
    return "builder" if _BUILDER_SIGNS.search(said) else "dockerfile"


def log_tail(output: str, lines: int = LOG_TAIL_LINES) -> str:
    kept = [ln.rstrip()[:300] for ln in output.strip().splitlines() if ln.strip()]
    return "\n".join(kept[-lines:])


def _link(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def _blob(layout: Path, digest: str) -> Path:
    algo, _, hexd = digest.partition(":")
    return layout / "blobs" / algo / hexd


def _materialize(layout: Path, manifest: dict, base_rootfs: Path, rootfs: Path) -> None:
    """The base's root filesystem hard-linked, then the build's own layers (all after the base's
    one) applied over it; the files finish_rootfs rewrites are unshared from the base first."""
    res = subprocess.run(["cp", "-al", str(base_rootfs), str(rootfs)], capture_output=True, text=True)
    if res.returncode != 0:
        raise DockerfileError(f"cannot link the base's root filesystem {base_rootfs}: {res.stderr.strip()[-300:]}")
    layers = [str(_blob(layout, layer["digest"])) for layer in manifest["layers"][1:]]
    if layers:
        res = subprocess.run([sys.executable, "-m", "termforge.images.layers", str(rootfs), *layers],
                             capture_output=True, text=True, timeout=BUILD_TIMEOUT_SEC)
        if res.returncode != 0:
            raise DockerfileError(f"cannot apply the built layers: {(res.stderr or res.stdout).strip()[-300:]}")
    for rel in REWRITTEN:
        path = rootfs / rel
        if path.is_file() and not path.is_symlink() and path.stat().st_nlink > 1:
            tmp = path.with_name(f".{path.name}.unshare")
            shutil.copy2(path, tmp)
            os.replace(tmp, path)


__all__ = ["BUILDER", "DockerfileError", "DockerfileImage", "build_dockerfile", "build_key", "check_tools",
           "find_built", "log_tail", "subid_range"]
