"""Building base images into the per-user image cache (docs/images.md).

A root base is built by `mmdebstrap` from its declaration's apt sources; a layered or derived
base by apt inside a copy of its parent's root filesystem (as root: about 10 s instead of a
fresh mmdebstrap; without root, mmdebstrap's unshare mode builds the whole chain at once). Every
build then gets the same finishing touches (no device nodes, reproducible /etc files, the mount
points the sandboxes bind over, the sandbox user), its lock (the exact version of every
installed package, read from the root filesystem's dpkg database) and its layer: a tar of the
root filesystem with every time clamped to the declaration's SOURCE_DATE_EPOCH, whose sha256 is
the base's digest (an OCI layer digest; the same content gives the same digest).

Cache layout (one per user, shared by every task and every clone)::

    <cache>/bases/<name>-<key>/rootfs/      the root filesystem the bwrap runtime binds read-only as /
                              layer.tar     the same tree as one OCI layer
                              base.json     declaration, key, digest, lock digest, build facts
                              lock.txt      `package<TAB>version<TAB>architecture`, one a line
                              build.log
    <cache>/locks/<key>.lock                one builder at a time per base; others wait

The key hashes the declaration (and a layered base's parent digest), so a base is rebuilt only
when what it declares changes. Builds go to a staging directory renamed into place at the end:
a killed build leaves nothing that looks finished.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from termforge.errors import TermforgeError
from termforge.images.declarations import SCRIPTS_DIR, SLIM_DPKG_OPTIONS, BaseDecl, declaration, derive
from termforge.images.store import (ImageStore, file_sha256, find_base_for, image_cache_dir, image_store_dir,
                                   register_base)
from termforge.io import atomic_write_json, atomic_write_text, read_json, stable_hash

# Bump when the finishing touches or the layer format change: every base is then rebuilt.
BUILDER = "termforge-base-2"
# Directories the sandboxes mount over (a read-only / cannot get new mount points) and their modes.
MOUNT_POINTS = {"dev": 0o755, "proc": 0o755, "app": 0o755, "home": 0o755, "home/user": 0o755, "logs": 0o755, "tests": 0o755,
                "verifier": 0o755, "solution": 0o755, "tmp": 0o1777}
SANDBOX_USER = "user:x:1000:1000:termforge sandbox user:/home/user:/bin/bash"
SANDBOX_GROUP = "user:x:1000:"
# Files whose content depends on when or where a build ran (mmdebstrap's cleanup/reproducible list).
UNREPRODUCIBLE = ("var/log/dpkg.log", "var/log/apt/history.log", "var/log/apt/term.log", "var/log/alternatives.log",
                  "var/cache/ldconfig/aux-cache", "var/log/apt/eipp.log.xz", "var/lib/dbus/machine-id",
                  "var/cache/debconf/config.dat-old", "var/cache/debconf/templates.dat-old",
                  "var/lib/dpkg/status-old", "var/lib/dpkg/diversions-old", "var/lib/dpkg/statoverride-old",
                  "var/cache/apt/pkgcache.bin", "var/cache/apt/srcpkgcache.bin")
SANDBOX_PATH_ENV = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
BUILD_TIMEOUT_SEC = 1800
# Bases that failed to build in this process (key -> reason): the tasks that share one are told
# at once instead of each running apt again. A new process tries again.
_FAILED: dict[str, str] = {}



def _check_reachable(path: Path) -> None:
    """Sandboxes of a root host run under unprivileged uids: every folder above a root filesystem
    must let others through, or bwrap cannot bind it."""
    if os.geteuid() != 0:
        return
    for p in [path, *path.parents]:
        try:
            mode = p.stat().st_mode
        except FileNotFoundError:
            continue
        if not mode & 0o001:
            raise TermforgeError(
                f"image cache {path}: {p} is not searchable by other users (mode {oct(mode & 0o777)}), and "
                "sandboxes run under their own uids; set TERMFORGE_IMAGE_CACHE to a folder they can reach "
                "(e.g. /var/cache/termforge/images)")


def _mkdirs(path: Path) -> None:
    for p in reversed([path, *path.parents]):
        if not p.exists():
            p.mkdir(mode=0o755)
            os.chmod(p, 0o755)  # whatever the umask


@dataclass
class BuiltBase:
    """A base in the cache."""

    decl: BaseDecl
    dir: Path
    record: dict

    @property
    def rootfs(self) -> Path:
        return self.dir / "rootfs"

    @property
    def layer(self) -> Path:
        return self.dir / "layer.tar"

    @property
    def digest(self) -> str:
        return self.record["digest"]

    @property
    def key(self) -> str:
        return self.record["key"]

    def lock_lines(self) -> list[str]:
        return (self.dir / "lock.txt").read_text().splitlines()

    def installed(self) -> set[str]:
        return {line.split("\t", 1)[0] for line in self.lock_lines() if line}

    def ref(self) -> dict:
        """What an artefact records about the base it depends on."""
        r = self.record
        return {"name": r["name"], "names": r["names"], "digest": r["digest"], "key": r["key"],
                "lock_digest": r["lock_digest"], "packages": r["declaration"]["packages"],
                "parent": (r["parent"] or {}).get("digest")}


def base_key(decl: BaseDecl, parent: BuiltBase | None) -> str:
    return stable_hash([BUILDER, decl.own(), parent.digest if parent else None], 20)


def find_built(cache: Path, name: str, key: str, decl: BaseDecl | None = None) -> BuiltBase | None:
    d = Path(cache) / "bases" / f"{name}-{key}"
    if not (d / "base.json").is_file():
        return None
    record = read_json(d / "base.json")
    return BuiltBase(decl or _decl_from_record(record), d, record)


def _decl_from_record(record: dict) -> BaseDecl:
    try:
        return declaration(record["name"])
    except TermforgeError:  # a derived base: only its record knows it
        return BaseDecl(record["name"], record.get("description", ""), tuple(record.get("names", ())),
                        packages=tuple(record["declaration"]["packages"]), derived=True)


@contextmanager
def _locked(path: Path, what: str, log: Callable[[str], None]):
    _mkdirs(path.parent)
    with open(path, "a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"images: waiting for another process building {what}")
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def ensure_base(decl: BaseDecl | str, cache: str | os.PathLike | None = None,
                log: Callable[[str], None] = print, timeout: float = BUILD_TIMEOUT_SEC) -> BuiltBase:
    """The built base for a declaration (by object or name): from the cache, or built now."""
    decl = declaration(decl) if isinstance(decl, str) else decl
    cache = image_cache_dir(cache)
    parent = ensure_base(decl.parent, cache, log, timeout) if decl.parent else None
    key = base_key(decl, parent)
    found = find_built(cache, decl.name, key, decl)
    if found:
        return found
    if key in _FAILED:
        raise TermforgeError(_FAILED[key])
    _mkdirs(cache / "bases")
    _check_reachable(cache / "bases")
    with _locked(cache / "locks" / f"{key}.lock", f"base {decl.name}", log):
        found = find_built(cache, decl.name, key, decl)  # built while we waited
        if found:
            return found
        for stale in (cache / "bases").glob(f".stage-{key}-*"):
            shutil.rmtree(stale, ignore_errors=True)
        stage = cache / "bases" / f".stage-{key}-{os.getpid()}"
        _mkdirs(stage)
        store = ImageStore(image_store_dir(None, cache))
        final = cache / "bases" / f"{decl.name}-{key}"
        try:
            built = _from_store(decl, key, stage, store, log) or _build(decl, parent, key, stage, cache, log, timeout)
            os.rename(stage, final)
        except TermforgeError as exc:
            _FAILED[key] = str(exc)
            raise
        finally:
            shutil.rmtree(stage, ignore_errors=True)
        built.dir = final
        register_base(built, store)
    return built


def ensure_task_base(base: str, apt_packages=(), cache: str | os.PathLike | None = None,
                     log: Callable[[str], None] = print) -> BuiltBase:
    """The base a task runs on: its base (a declared base by name or image name, else an image
    of the store), plus a derived base when its `apt_packages` add packages the base lacks."""
    try:
        decl = declaration(base)
    except TermforgeError:
        decl = find_base_for(base, ImageStore(image_store_dir(None, cache)))
        if decl is None:
            raise TermforgeError(f"base image {base} is neither declared nor in the image store; add it with "
                                 f"`termforge images add {base} TARBALL|OCI`") from None
    parent = ensure_base(decl, cache, log)
    derived = derive(decl, apt_packages, parent.installed())
    return parent if derived is decl else ensure_base(derived, cache, log)


# -- the build itself ---------------------------------------------------------------------------

def _build(decl: BaseDecl, parent: BuiltBase | None, key: str, stage: Path, cache: Path,
           log: Callable[[str], None], timeout: float) -> BuiltBase:
    rootfs = stage / "rootfs"
    what = f"base {decl.name}" + (f" ({' '.join(decl.packages)} on {parent.decl.name})" if parent else "")
    log(f"images: building {what} ...")
    start = time.monotonic()
    if decl.image:
        method, out = "store", _unpack_store_root(decl, rootfs, cache)
    elif parent is None:
        method, out = "mmdebstrap", _mmdebstrap(decl, rootfs, timeout)
    elif os.geteuid() == 0:
        method, out = "apt", _apt_layer(decl, parent, rootfs, timeout, cache, log)
    else:
        # Without root, apt cannot install into a copy of the parent (dpkg must chown files to
        # system users): mmdebstrap's unshare mode builds the whole chain in one go instead.
        method, out = "mmdebstrap", _mmdebstrap(decl.flattened(), rootfs, timeout)
    if os.geteuid() == 0 and (rootfs / "usr" / "bin" / "python3").exists():
        out += _compile_python(rootfs, timeout, decl.name)
    atomic_write_text(stage / "build.log", out)
    finish_rootfs(rootfs)
    lock = read_lock(rootfs)
    atomic_write_text(stage / "lock.txt", "".join(f"{n}\t{v}\t{a}\n" for n, v, a in lock))
    digest, size = write_layer(rootfs, stage / "layer.tar", decl.epoch)
    lock_text = (stage / "lock.txt").read_bytes()
    record = {
        "name": decl.name, "description": decl.description, "names": list(decl.names), "key": key,
        "builder": BUILDER, "declaration": decl.own(), "derived": decl.derived,
        "parent": parent.ref() if parent else None, "digest": digest, "size": size,
        "lock_digest": "sha256:" + hashlib.sha256(lock_text).hexdigest(), "package_count": len(lock),
        "source_date_epoch": decl.epoch, "method": method, "build_seconds": round(time.monotonic() - start, 1),
        "tools": {"mmdebstrap": _tool_version(["mmdebstrap", "--version"])} if method == "mmdebstrap" else {},
    }
    atomic_write_json(stage / "base.json", record)
    os.chmod(stage, 0o755)
    log(f"images: built {what} in {record['build_seconds']:.1f}s: {len(lock)} packages, "
        f"{size / 1e6:.0f} MB, {digest[:19]}")
    return BuiltBase(decl, stage, record)


def _from_store(decl: BaseDecl, key: str, stage: Path, store, log: Callable[[str], None]) -> BuiltBase | None:
    """The base from the image store, when an image there carries its key (one moved here from
    another machine with `termforge images add`): its layer unpacked, nothing rebuilt."""
    image = store.find_label("org.termforge.base.key", key)
    if image is None or len(image.layers) != 1:
        return None
    import json

    record = json.loads(image.labels["org.termforge.base.record"])
    desc, diff_ids = image.layers[0], (image.config.get("rootfs") or {}).get("diff_ids", [])
    if diff_ids != [record.get("digest")]:
        raise TermforgeError(f"image store {store.root}: {image.name} claims base {decl.name} {key} but its layer "
                             "is not the one its record names")
    log(f"images: unpacking base {decl.name} from the image store ({image.name})")
    layer, blob = stage / "layer.tar", store.blob(desc["digest"])
    if desc.get("mediaType", "").endswith("gzip"):  # skopeo compresses layers in the archives it writes
        import gzip

        with gzip.open(blob, "rb") as src, open(layer, "wb") as out:
            shutil.copyfileobj(src, out, 1 << 20)
    else:
        try:
            os.link(blob, layer)
        except OSError:
            shutil.copyfile(blob, layer)
    if file_sha256(layer) != record["digest"]:
        raise TermforgeError(f"image store {store.root}: the layer of {image.name} does not match its digest")
    rootfs = stage / "rootfs"
    rootfs.mkdir()
    os.chmod(rootfs, 0o755)
    _run(["tar", "--extract", f"--file={layer}", f"--directory={rootfs}", "--numeric-owner"]
         + (["--same-owner", "--same-permissions"] if os.geteuid() == 0 else []),
         BUILD_TIMEOUT_SEC, f"base image {decl.name}: unpack")
    lock = read_lock(rootfs)
    atomic_write_text(stage / "lock.txt", "".join(f"{n}\t{v}\t{a}\n" for n, v, a in lock))
    if "sha256:" + hashlib.sha256((stage / "lock.txt").read_bytes()).hexdigest() != record["lock_digest"]:
        raise TermforgeError(f"base {decl.name}: the unpacked root filesystem's packages differ from its lock")
    record = {**record, "method": f"store:{image.name}", "key": key}
    atomic_write_json(stage / "base.json", record)
    atomic_write_text(stage / "build.log", f"unpacked from {store.root} ({image.name}, {image.digest})\n")
    os.chmod(stage, 0o755)
    return BuiltBase(decl, stage, record)


def _run(argv: list[str], timeout: float, what: str, env: dict | None = None) -> str:
    try:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    except FileNotFoundError:
        raise TermforgeError(f"{what}: {argv[0]} is not installed (scripts/setup.sh installs it)") from None
    except subprocess.TimeoutExpired:
        raise TermforgeError(f"{what}: timed out after {timeout:.0f}s") from None
    out = f"$ {' '.join(argv)}\n{res.stdout}{res.stderr}"
    if res.returncode != 0:
        tail = [ln for ln in (res.stderr or res.stdout).strip().splitlines() if ln.strip()][-3:]
        raise TermforgeError(f"{what} failed (exit {res.returncode}): {' | '.join(tail)}")
    return out


def _tool_version(argv: list[str]) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def _build_env(epoch: int) -> dict:
    return {"PATH": SANDBOX_PATH_ENV, "LC_ALL": "C.UTF-8", "SOURCE_DATE_EPOCH": str(epoch),
            "HOME": os.environ.get("HOME", "/root"), "TMPDIR": os.environ.get("TMPDIR", "/tmp")}


def mmdebstrap_argv(decl: BaseDecl, rootfs: Path) -> list[str]:
    argv = ["mmdebstrap", f"--variant={decl.variant}", f"--mode={'root' if os.geteuid() == 0 else 'unshare'}",
            "--format=directory", '--aptopt=Acquire::Languages "none"']
    if decl.slim:
        argv += [f"--dpkgopt={o}" for o in SLIM_DPKG_OPTIONS]
    if decl.packages:
        argv.append("--include=" + ",".join(decl.packages))
    return argv + [decl.suite, str(rootfs), *decl.sources]


def _unpack_store_root(decl: BaseDecl, rootfs: Path, cache: Path) -> str:
    """A FROM image from the store as a root filesystem (umoci: every layer, whiteouts honoured),
    checked to be the very image the declaration names."""
    store = ImageStore(image_store_dir(None, cache))
    stored = store.get(decl.image)
    if stored is None or stored.digest != decl.image_digest:
        raise TermforgeError(f"base image {decl.image}: the image store no longer holds {decl.image_digest[:19]}")
    bundle = rootfs.parent / "bundle"
    store.unpack(stored.name, bundle)
    os.rename(bundle / "rootfs", rootfs)
    os.chmod(rootfs, 0o755)
    shutil.rmtree(bundle)
    return f"umoci unpack {store.oci_ref(stored.name)} ({stored.digest})\n"


def _mmdebstrap(decl: BaseDecl, rootfs: Path, timeout: float) -> str:
    return _run(mmdebstrap_argv(decl, rootfs), timeout, f"base image {decl.name}: mmdebstrap",
                env=_build_env(decl.epoch))


# The apt layer of a derived base, run in a private mount and pid namespace (images/scripts/).
APT_LAYER_SCRIPT = (SCRIPTS_DIR / "apt-layer.sh").read_text()


def _apt_layer(decl: BaseDecl, parent: BuiltBase, rootfs: Path, timeout: float, cache: Path,
               log: Callable[[str], None]) -> str:
    # cp -a keeps owners, modes, hard links and special files exactly (shutil would not).
    _run(["cp", "-a", "--reflink=auto", str(parent.rootfs), str(rootfs)], timeout, f"base image {decl.name}: copy")
    apt = cache / "apt"
    _mkdirs(apt)
    # apt locks its lists and archives: builds sharing them take turns for the apt step.
    with _locked(cache / "locks" / "apt.lock", "apt's shared caches", log):
        return _run(["unshare", "--mount", "--propagation", "private", "--pid", "--fork", "--kill-child",
                     "bash", "-c", APT_LAYER_SCRIPT, "apt-layer", str(rootfs), str(apt), *decl.packages],
                    timeout, f"base image {decl.name}: apt-get install {' '.join(decl.packages)}",
                    env=_build_env(decl.epoch))


# Python's byte code as unchecked-hash .pyc files (images/scripts/compile-python.sh says why).
COMPILE_SCRIPT = (SCRIPTS_DIR / "compile-python.sh").read_text()


def _compile_python(rootfs: Path, timeout: float, name: str) -> str:
    return _run(["unshare", "--mount", "--propagation", "private", "--pid", "--fork", "--kill-child",
                 "bash", "-c", COMPILE_SCRIPT, "compile", str(rootfs)], timeout,
                f"base image {name}: compile Python byte code")


def finish_rootfs(rootfs: Path) -> None:
    """What every base gets after its packages: no device nodes (sandboxes mount their own /dev,
    and a layer with them cannot be unpacked without root), /etc files that do not name the build
    host, the sandbox user, the mount points, and no logs or caches that record when it was built."""
    dev = rootfs / "dev"
    if dev.is_dir() and not dev.is_symlink():
        for p in dev.iterdir():
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            else:
                p.unlink()
    etc = rootfs / "etc"
    etc.mkdir(exist_ok=True)
    (etc / "hostname").write_text("termforge\n")
    (etc / "hosts").write_text("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
    resolv = etc / "resolv.conf"
    if resolv.is_symlink():
        resolv.unlink()
    resolv.write_text("")  # a mount point: networked sandboxes bind the host's over it
    if (etc / "machine-id").exists():
        (etc / "machine-id").write_text("")
    for name, line in (("passwd", SANDBOX_USER), ("group", SANDBOX_GROUP)):
        path = etc / name
        text = path.read_text() if path.is_file() else ""
        if not any(ln.split(":")[2:3] == ["1000"] for ln in text.splitlines()):
            path.write_text(text + ("" if text.endswith("\n") or not text else "\n") + line + "\n")
    for rel in UNREPRODUCIBLE:
        (rootfs / rel).unlink(missing_ok=True)
    lists = rootfs / "var/lib/apt/lists"
    if lists.is_dir():
        for p in lists.iterdir():
            if p.is_file() and p.name != "lock":
                p.unlink()
    for rel in ("var/cache/apt/archives", "tmp", "run"):
        d = rootfs / rel
        if d.is_dir():
            for p in d.iterdir():
                if p.name in ("partial", "lock"):
                    continue
                shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
    for rel, mode in MOUNT_POINTS.items():
        d = rootfs / rel
        d.mkdir(parents=True, exist_ok=True)
        os.chmod(d, mode)


def read_lock(rootfs: Path) -> list[tuple[str, str, str]]:
    """Installed packages (name, version, architecture), sorted, from the root filesystem's
    dpkg database: what `dpkg-query -W` inside it prints, without running anything in it (none
    for an image without dpkg)."""
    if not (rootfs / "var/lib/dpkg/status").is_file():
        return []
    status = (rootfs / "var/lib/dpkg/status").read_text(errors="replace")
    rows = []
    for stanza in status.split("\n\n"):
        fields = {}
        for line in stanza.splitlines():
            if line and not line[0].isspace() and ":" in line:
                k, v = line.split(":", 1)
                fields[k] = v.strip()
        if fields.get("Status", "").endswith(" installed") and fields.get("Package"):
            rows.append((fields["Package"], fields.get("Version", ""), fields.get("Architecture", "")))
    return sorted(rows)


def write_layer(rootfs: Path, out: Path, epoch: int) -> tuple[str, int]:
    """The root filesystem as one reproducible tar (sorted names, numeric owners, times clamped
    to `epoch`, no atime/ctime): (its "sha256:..." digest, its size)."""
    names = sorted(os.listdir(rootfs))
    tmp = out.with_name(f".{out.name}.tmp")
    _run(["tar", "--create", f"--file={tmp}", f"--directory={rootfs}", "--sort=name", "--format=pax",
          "--pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime", f"--mtime=@{epoch}",
          "--clamp-mtime", "--numeric-owner", "--", *names], BUILD_TIMEOUT_SEC, f"layer of {rootfs}")
    digest = file_sha256(tmp)
    os.chmod(tmp, 0o644)
    os.replace(tmp, out)
    return digest, out.stat().st_size





def built_bases(cache: str | os.PathLike | None = None) -> list[BuiltBase]:
    """Every base in the cache."""
    root = image_cache_dir(cache) / "bases"
    out = []
    for d in sorted(root.glob("*/base.json")) if root.is_dir() else []:
        record = read_json(d)
        out.append(BuiltBase(_decl_from_record(record), d.parent, record))
    return out


__all__ = ["BuiltBase", "ensure_base", "ensure_task_base", "find_built", "built_bases",
           "read_lock", "write_layer", "finish_rootfs", "MOUNT_POINTS", "BUILDER", "mmdebstrap_argv"]
