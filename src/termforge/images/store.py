"""The local image store: named OCI images in one OCI image layout (docs/images.md).

One layout (`oci-layout`, `index.json`, `blobs/sha256/`) holds every image; each is named by the
`org.opencontainers.image.ref.name` annotation of its index entry, in Docker's normalised short
form (`debian:bookworm-slim`, `termforge/base:bookworm`). Blobs are content-addressed, so layers
are stored once however many images share them. Every tool of the container world reads it by
the transport `oci:<store>:<name>`: `skopeo inspect`, `skopeo copy` (to an archive, another
registry, containers-storage for buildah), `umoci unpack`, `buildah from`.

Default location: $TERMFORGE_IMAGE_STORE, else `<image cache>/store` (beside the built bases,
so their layers go in as hard links, not copies).

What goes in:
- the built bases, under their declared names (ensure_base registers them; derived bases under
  `termforge/derived:<name>`), labelled with their key so a machine whose cache lacks a base
  unpacks it from here instead of building it (the way to move bases to an offline cluster);
- whatever a user adds: `termforge images add NAME SOURCE`, where SOURCE is a root filesystem
  tarball (docker export, mmdebstrap), an OCI layout folder, an OCI archive or a `docker save`
  archive.

For Dockerfile builds (buildah): `to_containers_storage(name, root, runroot)` copies an image
into a vfs containers-storage under its own name, so `buildah bud --pull=never` resolves
`FROM name` offline (docs/images.md shows the commands).
"""

from __future__ import annotations

import fcntl
import gzip
import hashlib
import ipaddress
import json
import lzma
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from termforge.errors import TermforgeError
from termforge.images.declarations import BaseDecl, declaration, normalize_name
from termforge.io import atomic_write_bytes, canonical_json

REF = "org.opencontainers.image.ref.name"
MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
LAYER_TYPE = "application/vnd.oci.image.layer.v1.tar"
LAYER_TYPES = (LAYER_TYPE, LAYER_TYPE + "+gzip", LAYER_TYPE + "+zstd",
               "application/vnd.docker.image.rootfs.diff.tar.gzip")
DEFAULT_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# skopeo's transports for images already on this machine (`images add` takes those).
LOCAL_TRANSPORTS = {"oci", "oci-archive", "docker-archive", "dir", "containers-storage", "docker-daemon"}
# Debian architecture -> OCI/Go architecture.
OCI_ARCH = {"amd64": "amd64", "arm64": "arm64", "armhf": "arm", "i386": "386", "ppc64el": "ppc64le",
            "s390x": "s390x", "riscv64": "riscv64"}


def image_cache_dir(explicit: str | os.PathLike | None = None) -> Path:
    """The per-user image cache: `explicit`, else $TERMFORGE_IMAGE_CACHE, else
    $XDG_CACHE_HOME/termforge/images, else ~/.cache/termforge/images (root: /var/cache/termforge/
    images, since sandboxes run under other uids and root's home is private)."""
    if explicit:
        return Path(explicit)
    if os.environ.get("TERMFORGE_IMAGE_CACHE"):
        return Path(os.environ["TERMFORGE_IMAGE_CACHE"])
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]) / "termforge" / "images"
    if os.geteuid() == 0:
        return Path("/var/cache/termforge/images")
    return Path.home() / ".cache" / "termforge" / "images"


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


def image_store_dir(explicit: str | os.PathLike | None = None, cache: str | os.PathLike | None = None) -> Path:
    if explicit:
        return Path(explicit)
    if os.environ.get("TERMFORGE_IMAGE_STORE"):
        return Path(os.environ["TERMFORGE_IMAGE_STORE"])
    return image_cache_dir(cache) / "store"


def rfc3339(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def epoch_of(created: str) -> int:
    """An OCI `created` time (RFC 3339) as seconds; 0 when absent."""
    if not created:
        return 0
    return int(datetime.fromisoformat(created.replace("Z", "+00:00")).timestamp())


@dataclass
class StoredImage:
    name: str
    digest: str  # the manifest's
    manifest: dict
    config: dict

    @property
    def labels(self) -> dict:
        return (self.config.get("config") or {}).get("Labels") or {}

    @property
    def layers(self) -> list[dict]:
        return self.manifest.get("layers", [])

    @property
    def size(self) -> int:
        return sum(layer.get("size", 0) for layer in self.layers)

    @property
    def created(self) -> str:
        return self.config.get("created", "")


class ImageStore:
    def __init__(self, root: str | os.PathLike | None = None):
        self.root = image_store_dir(root)

    # -- layout plumbing -----------------------------------------------------------------------
    def _ensure(self) -> None:
        blobs = self.root / "blobs" / "sha256"
        if not blobs.is_dir():
            self.root.parent.mkdir(parents=True, exist_ok=True)
            for p in (self.root, self.root / "blobs", blobs):
                p.mkdir(exist_ok=True)
                os.chmod(p, 0o755)
        if not (self.root / "oci-layout").exists():
            atomic_write_bytes(self.root / "oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        if not (self.root / "index.json").exists():
            self._write_index({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                               "manifests": []})

    @contextmanager
    def _locked(self):
        self._ensure()
        with open(self.root / ".lock", "a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _index(self) -> dict:
        path = self.root / "index.json"
        if not path.exists():
            return {"schemaVersion": 2, "manifests": []}
        try:
            return json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise TermforgeError(f"image store {self.root}: index.json is unreadable ({exc})") from None

    def _write_index(self, index: dict) -> None:
        atomic_write_bytes(self.root / "index.json", canonical_json(index).encode())

    def blob(self, digest: str) -> Path:
        algo, _, hexd = digest.partition(":")
        return self.root / "blobs" / algo / hexd

    def _json_blob(self, digest: str) -> dict:
        try:
            return json.loads(self.blob(digest).read_bytes())
        except (OSError, json.JSONDecodeError) as exc:
            raise TermforgeError(f"image store {self.root}: blob {digest} is missing or corrupt ({exc})") from None

    def put_bytes(self, data: bytes) -> tuple[str, int]:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        if not self.blob(digest).exists():
            atomic_write_bytes(self.blob(digest), data)
        return digest, len(data)

    def put_file(self, path: Path, digest: str | None = None) -> tuple[str, int]:
        """A file as a blob: hard-linked when it is on the same filesystem (the cache's layers)."""
        digest = digest or file_sha256(path)
        target = self.blob(digest)
        if not target.exists():
            tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
            try:
                os.link(path, tmp)
            except OSError:
                shutil.copyfile(path, tmp)
            os.chmod(tmp, 0o644)
            os.replace(tmp, target)
        return digest, target.stat().st_size

    # -- reading -------------------------------------------------------------------------------
    def images(self) -> list[StoredImage]:
        out = []
        for entry in self._index().get("manifests", []):
            name = (entry.get("annotations") or {}).get(REF)
            if not name or entry.get("mediaType", MANIFEST_TYPE) != MANIFEST_TYPE:
                continue
            manifest = self._json_blob(entry["digest"])
            out.append(StoredImage(name, entry["digest"], manifest, self._json_blob(manifest["config"]["digest"])))
        return sorted(out, key=lambda i: i.name)

    def get(self, name: str) -> StoredImage | None:
        wanted = normalize_name(name)
        for image in self.images():
            if normalize_name(image.name) == wanted:
                return image
        return None

    def find_label(self, key: str, value: str) -> StoredImage | None:
        for image in self.images():
            if image.labels.get(key) == value:
                return image
        return None

    def oci_ref(self, name: str) -> str:
        """The image as skopeo, umoci and buildah address it."""
        image = self.get(name)
        if image is None:
            raise TermforgeError(f"image {name} is not in the image store {self.root} "
                                 f"(termforge images add {name} TARBALL|OCI)")
        return f"oci:{self.root}:{image.name}"

    # -- writing -------------------------------------------------------------------------------
    def _tag(self, name: str, digest: str, size: int) -> None:
        index = self._index()
        keep = [m for m in index.get("manifests", [])
                if normalize_name((m.get("annotations") or {}).get(REF, "")) != normalize_name(name)]
        keep.append({"mediaType": MANIFEST_TYPE, "digest": digest, "size": size, "annotations": {REF: name}})
        index["manifests"] = sorted(keep, key=lambda m: (m.get("annotations") or {}).get(REF, ""))
        self._write_index(index)

    def add_layers(self, name: str, layers: list[tuple[Path, str | None]], *, labels: dict | None = None,
                   created: int = 0, architecture: str = "amd64", env: list[str] | None = None,
                   workdir: str = "/", history: list[str] | None = None,
                   base: StoredImage | None = None, carried: dict | None = None) -> StoredImage:
        """Name an image made of uncompressed layer tarballs (on top of `base`'s layers, if any).
        `carried`: config fields (Env, WorkingDir, User, Entrypoint, Cmd) taken over from the image
        these layers came from, so what is built on this one runs as on that one."""
        with self._locked():
            descriptors = list(base.layers) if base else []
            diff_ids = list((base.config.get("rootfs") or {}).get("diff_ids", [])) if base else []
            for path, digest in layers:
                digest, size = self.put_file(Path(path), digest)
                descriptors.append({"mediaType": LAYER_TYPE, "digest": digest, "size": size})
                diff_ids.append(digest)
            config = {
                "created": rfc3339(created), "architecture": architecture, "os": "linux",
                "config": {"Env": env or [DEFAULT_PATH], "Cmd": ["/bin/bash"], "WorkingDir": workdir,
                           **(carried or {}),
                           "Labels": {**(base.labels if base else {}), **(labels or {})}},
                "rootfs": {"type": "layers", "diff_ids": diff_ids},
                "history": (list(base.config.get("history", [])) if base else [])
                + [{"created": rfc3339(created), "created_by": h} for h in (history or ["termforge"])],
            }
            cdigest, csize = self.put_bytes(canonical_json(config).encode())
            manifest = {"schemaVersion": 2, "mediaType": MANIFEST_TYPE,
                        "config": {"mediaType": CONFIG_TYPE, "digest": cdigest, "size": csize},
                        "layers": descriptors}
            mdigest, msize = self.put_bytes(canonical_json(manifest).encode())
            self._tag(name, mdigest, msize)
        return StoredImage(name, mdigest, manifest, config)

    def copy_image(self, other: "ImageStore", name: str, as_name: str | None = None) -> StoredImage:
        """An image of another store (its blobs hard-linked where the filesystem allows)."""
        image = other.get(name)
        if image is None:
            raise TermforgeError(f"image {name} is not in the image store {other.root}")
        with self._locked():
            for digest in [image.manifest["config"]["digest"], *(layer["digest"] for layer in image.layers)]:
                self.put_file(other.blob(digest), digest)
            self.put_file(other.blob(image.digest), image.digest)
            self._tag(as_name or image.name, image.digest, other.blob(image.digest).stat().st_size)
        return StoredImage(as_name or image.name, image.digest, image.manifest, image.config)

    def add(self, name: str, source: str | os.PathLike, ref: str | None = None) -> StoredImage:
        """`termforge images add`: a root filesystem tarball (plain or compressed), an OCI layout
        folder, an OCI archive or a `docker save` archive, stored under `name`."""
        name = normalize_name(name)
        source = Path(source)
        if not source.exists():
            raise TermforgeError(f"images add {name}: {source} does not exist")
        if source.is_dir():
            if not (source / "oci-layout").is_file():
                raise TermforgeError(f"images add {name}: {source} is a folder but not an OCI image layout "
                                     "(no oci-layout file)")
            return self._copy_in(name, f"oci:{source}", _layout_ref(source / "index.json", ref, source))
        try:
            with tarfile.open(source) as tar:
                members = set(tar.getnames())
        except (tarfile.TarError, OSError) as exc:
            raise TermforgeError(f"images add {name}: {source} is not a tar archive or OCI layout ({exc})") from None
        norm = {m.lstrip("./") for m in members}
        if "oci-layout" in norm and "index.json" in norm:
            with tarfile.open(source) as tar:
                member = next(m for m in tar.getmembers() if m.name.lstrip("./") == "index.json")
                index = json.loads(tar.extractfile(member).read())
            return self._copy_in(name, "oci-archive:" + str(source), _ref_in(index, ref, source))
        if "manifest.json" in norm and any(m.endswith((".tar", "layer.tar")) or m.startswith("blobs/") for m in norm):
            return self._copy_in(name, "docker-archive:" + str(source), ref)
        return self._add_rootfs_tarball(name, source)

    def pull(self, ref: str, name: str | None = None) -> StoredImage:
        """`termforge images pull REF`: an image from a registry (`docker://ubuntu:24.04`,
        `docker://ghcr.io/astral-sh/uv:0.8.15`, `docker://debian@sha256:...`; `docker://` may be left
        out), stored under `name` (default: the reference in Docker's short form, so a Dockerfile's
        `FROM` of the same reference finds it). skopeo checks a digest reference against what the
        registry serves. TLS is verified for every registry except one on the loopback interface."""
        source = ref.strip()
        if source.startswith("docker://"):
            source = source[len("docker://"):]
        elif source.split(":", 1)[0] in LOCAL_TRANSPORTS:
            raise TermforgeError(f"images pull {ref}: only registry references (docker://NAME[:TAG|@DIGEST]) are "
                                 "pulled; add archives and layouts with `termforge images add NAME SOURCE`")
        if not source or source.startswith("/"):
            raise TermforgeError(f"images pull {ref!r}: not an image reference (docker://NAME[:TAG|@DIGEST])")
        name = normalize_name(name or source)
        check_not_declared(name, "images pull")
        repo, at, digest = source.partition("@")
        if at and ":" in repo.rsplit("/", 1)[-1]:
            # containers/image refuses a tag beside a digest; the digest is what names the content.
            repo = repo.rsplit(":", 1)[0]
        flags = [] if not is_loopback_registry(repo) else ["--src-tls-verify=false"]
        return self._copy_in(name, f"docker://{repo}{at}{digest}", None, flags, what=f"images pull {ref}")

    def _copy_in(self, name: str, src: str, ref: str | None, flags: list[str] = (),
                 what: str = "") -> StoredImage:
        src_ref = f"{src}:{ref}" if ref else src
        what = what or f"images add {name}"
        if declared_base_named(name) is not None and not src.startswith("docker://"):
            # A base moved from another machine goes back under its own name: no shadowing.
            labels = json.loads(_skopeo(["inspect", src_ref], what)).get("Labels") or {}
            check_not_declared(name, what, labels)
        with self._locked():
            # Drop the old entry first: skopeo 1.9 appends rather than replaces a ref.
            index = self._index()
            index["manifests"] = [m for m in index.get("manifests", [])
                                  if normalize_name((m.get("annotations") or {}).get(REF, "")) != name]
            self._write_index(index)
            _skopeo(["copy", "--quiet", *flags, src_ref, f"oci:{self.root}:{name}"], what)
        image = self.get(name)
        if image is None:
            raise TermforgeError(f"{what}: skopeo copied nothing from {src_ref}")
        return image

    def _add_rootfs_tarball(self, name: str, source: Path) -> StoredImage:
        """A root filesystem tarball becomes a one-layer image (decompressed: OCI layer digests
        name the uncompressed tar too, as diff_ids)."""
        check_not_declared(name, f"images add {name}")
        with open(source, "rb") as fh:
            magic = fh.read(6)
        opener = gzip.open if magic[:2] == b"\x1f\x8b" else lzma.open if magic == b"\xfd7zXZ\x00" else None
        self._ensure()
        tmp = Path(tempfile.mkstemp(dir=self.root, prefix=".add-")[1])
        try:
            h = hashlib.sha256()
            with (opener(source, "rb") if opener else open(source, "rb")) as src, open(tmp, "wb") as out:
                for chunk in iter(lambda: src.read(1 << 20), b""):
                    h.update(chunk)
                    out.write(chunk)
            return self.add_layers(name, [(tmp, "sha256:" + h.hexdigest())],
                                   history=[f"termforge images add {name} {source.name}"])
        finally:
            tmp.unlink(missing_ok=True)

    # -- reading out ---------------------------------------------------------------------------
    def save(self, name: str, archive: str | os.PathLike) -> Path:
        """One image as an OCI archive (docker load, podman load, apptainer build oci-archive://)."""
        archive = Path(archive)
        archive.parent.mkdir(parents=True, exist_ok=True)
        tmp = archive.with_name(f".{archive.name}.tmp")
        tmp.unlink(missing_ok=True)
        _skopeo(["copy", "--quiet", self.oci_ref(name), f"oci-archive:{tmp}:{normalize_name(name)}"],
                f"images save {name}")
        os.replace(tmp, archive)
        return archive

    def unpack(self, name: str, dest: str | os.PathLike) -> Path:
        """An image's root filesystem, all layers applied (umoci; whiteouts honoured)."""
        dest = Path(dest)
        argv = ["umoci", "unpack"] + ([] if os.geteuid() == 0 else ["--rootless"])
        argv += ["--image", f"{self.root}:{self.get(name).name if self.get(name) else name}", str(dest)]
        _run_tool(argv, f"images unpack {name}")
        return dest / "rootfs"

    def to_containers_storage(self, name: str, root: str | os.PathLike, runroot: str | os.PathLike,
                              as_name: str | None = None) -> str:
        """Copy an image into a vfs containers-storage (what `buildah --storage-driver vfs --root
        ROOT --runroot RUNROOT` reads) under its Docker name, so `FROM name` resolves there with
        `--pull=never`. Returns the name it was stored under."""
        stored = as_name or _docker_name(normalize_name(name))
        _skopeo(["copy", "--quiet", self.oci_ref(name), f"containers-storage:[vfs@{root}+{runroot}]{stored}"],
                f"images {name} -> containers-storage")
        return stored


def declared_base_named(name: str):
    """The declared base one of whose image names `name` is, or None."""
    from termforge.images.declarations import load_declarations

    return next((d for d in load_declarations().values() if name in {normalize_name(n) for n in d.names}), None)


def check_not_declared(name: str, what: str, labels: dict | None = None) -> None:
    """A declared base keeps its image names: `FROM debian:bookworm-slim` always builds on the
    declared base (pinned, locked, rebuilt from the Debian mirror), and the store entry of that
    name is the declared base's own registration, which ensure_base rewrites. Any other image
    stored under such a name would lose silently, so it is refused, saying which wins; the base
    itself (its label names it: a base moved from another machine) goes back under its name."""
    decl = declared_base_named(name)
    if decl is None or (labels or {}).get("org.termforge.base.name") == decl.name:
        return
    raise TermforgeError(f"{what}: {name} is the name of the declared base {decl.name}, which a Dockerfile's "
                         f"FROM {name} always uses (the declared base wins); store this image under another "
                         f"name (e.g. localhost/{name}) and name that in FROM")


def is_loopback_registry(reference: str) -> bool:
    """Whether an image reference's registry is on this machine's loopback interface (the only
    registries pulled from without TLS verification)."""
    first = reference.split("/", 1)[0] if "/" in reference else ""
    host = first.rsplit(":", 1)[0] if not first.startswith("[") else first[1:first.find("]")]
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _docker_name(name: str) -> str:
    """What docker/buildah call a short name: debian:12 -> docker.io/library/debian:12."""
    first = name.split("/", 1)[0]
    if "/" in name and ("." in first or ":" in first or first == "localhost"):
        return name
    return f"docker.io/{name}" if "/" in name else f"docker.io/library/{name}"


def _ref_in(index: dict, ref: str | None, source: Path) -> str | None:
    refs = [(m.get("annotations") or {}).get(REF) for m in index.get("manifests", [])]
    refs = [r for r in refs if r]
    if ref:
        if ref not in refs:
            raise TermforgeError(f"images add: {source} has no image named {ref!r} (it has {refs or 'no names'})")
        return ref
    if len(index.get("manifests", [])) == 1:
        return refs[0] if refs else None
    raise TermforgeError(f"images add: {source} holds {len(index.get('manifests', []))} images; name one with "
                         f"--ref (one of {refs})")


def _layout_ref(index_path: Path, ref: str | None, source: Path) -> str | None:
    try:
        index = json.loads(index_path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise TermforgeError(f"images add: {index_path} is unreadable ({exc})") from None
    return _ref_in(index, ref, source)


def _run_tool(argv: list[str], what: str) -> str:
    try:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=3600)
    except FileNotFoundError:
        raise TermforgeError(f"{what}: {argv[0]} is not installed (scripts/setup.sh installs it)") from None
    if res.returncode != 0:
        tail = [ln for ln in (res.stderr or res.stdout).strip().splitlines() if ln.strip()][-2:]
        raise TermforgeError(f"{what}: {argv[0]} failed: {' | '.join(tail)}")
    return res.stdout


def _skopeo(args: list[str], what: str) -> str:
    # An empty policy file would refuse everything: accept any image, as a local store should.
    policy = Path(tempfile.gettempdir()) / "termforge-skopeo-policy.json"
    if not policy.exists():
        atomic_write_bytes(policy, b'{"default":[{"type":"insecureAcceptAnything"}]}')
    return _run_tool(["skopeo", f"--policy={policy}", *args], what)


def register_base(built, store: ImageStore | None = None) -> list[StoredImage]:
    """Name a built base in the store: under its declared names, or `termforge/derived:<name>`
    for a derived base; labelled with its key, digest and lock digest (how another machine's
    ensure_base finds it here by key)."""
    store = store or ImageStore()
    r = built.record
    arch = next((a for n, _, a in _lock_rows(built) if n == "base-files"), "amd64")
    labels = {"org.termforge.base.name": r["name"], "org.termforge.base.key": r["key"],
              "org.termforge.base.digest": r["digest"], "org.termforge.base.lock-digest": r["lock_digest"],
              # Only what names the content: the label (so the image's digest) is the same on every machine.
              "org.termforge.base.record": canonical_json({k: v for k, v in r.items()
                                                           if k not in ("build_seconds", "method", "tools")}),
              "org.opencontainers.image.description": r.get("description", "")}
    names = list(r["names"]) or [f"termforge/derived:{r['name'].replace('+', '-')}"]
    carried = source_config(built.decl, store)
    out = []
    for name in names:
        existing = store.get(name)
        if existing and existing.labels.get("org.termforge.base.digest") == r["digest"] \
                and all(existing.config.get("config", {}).get(k) == v for k, v in (carried or {}).items()):
            out.append(existing)
            continue
        out.append(store.add_layers(normalize_name(name), [(built.layer, r["digest"])], labels=labels,
                                    created=r["source_date_epoch"], architecture=OCI_ARCH.get(arch, arch),
                                    history=[f"termforge images: base {r['name']} ({r['method']})"],
                                    carried=carried))
    return out


def source_config(decl, store: ImageStore) -> dict | None:
    """The config fields a base built from an image of the store (or derived from one) keeps of
    that image: its Env, WorkingDir, User, Entrypoint and Cmd, as Docker keeps them for every
    image built FROM it. None for a base made from Debian's packages (the engine's defaults)."""
    from termforge.images.imageconfig import CARRIED

    while decl is not None and not decl.image:
        decl = decl.parent
    if decl is None:
        return None
    image = store.get(decl.image)
    if image is None or image.digest != decl.image_digest:
        raise TermforgeError(f"base image {decl.image}: the image store no longer holds {decl.image_digest[:19]}, "
                             "whose configuration (Env, WorkingDir, User, Entrypoint) its builds take over")
    config = image.config.get("config") or {}
    return {k: config[k] for k in CARRIED if config.get(k) is not None}


def _lock_rows(built) -> list[tuple[str, str, str]]:
    return [tuple(line.split("\t")) for line in built.lock_lines() if line.count("\t") == 2]


def find_base_for(image: str, store=None) -> BaseDecl | None:
    """The base a Dockerfile's `FROM image` names: a declared base by one of its image names,
    else an image of the store (termforge images add), else None."""
    try:
        return declaration(image)
    except TermforgeError:
        pass
    stored = (store or ImageStore()).get(image)
    if stored is None:
        return None
    slug = re.sub(r"[^a-z0-9]+", "-", stored.name.lower()).strip("-")
    return BaseDecl(f"store-{slug}", f"{stored.name} from the image store", (), image=stored.name,
                    image_digest=stored.digest, source_date_epoch=epoch_of(stored.created))


__all__ = ["ImageStore", "StoredImage", "file_sha256", "find_base_for", "image_cache_dir", "image_store_dir",
           "register_base", "REF"]
