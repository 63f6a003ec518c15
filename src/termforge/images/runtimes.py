"""The runtimes a stage uses: termforge.runtime's sandboxes, handed the base images this package
builds. A sandbox runtime takes a root filesystem as a value and knows nothing of how one is made;
here each task's base (its task.json's `environment.base` plus apt packages, or a Harbor task's
Dockerfile build) is built or found in the image cache and given to it.
"""

from __future__ import annotations

from pathlib import Path

from termforge.errors import ConfigError, TermforgeError
from termforge.images.build import ensure_task_base
from termforge.images.declarations import DEFAULT_BASE
from termforge.images.dockerfile import find_built
from termforge.images.store import ImageStore, image_store_dir, register_base
from termforge.runtime import apptainer, bwrap
from termforge.runtime.base import Runtime
from termforge.runtime.bwrap import HOST_ROOTFS


class BwrapRuntime(bwrap.BwrapRuntime):
    """bwrap sandboxes on the base images of termforge.images (`image_cache`: where they are built
    and kept, termforge.images.image_cache_dir; `base`: the base of tasks whose task.json names
    none, else DEFAULT_BASE)."""

    default_base = DEFAULT_BASE

    def task_base(self, request: dict):
        """The built base for a request (built now when the cache lacks it)."""
        return ensure_task_base(request["base"], request["apt_packages"], self.image_cache, log=self.log)

    def resolve_rootfs(self, meta: dict, where: str) -> str:
        return resolve_rootfs(meta, where, self.image_cache, self.log)


def resolve_rootfs(meta: dict, where: str, image_cache=None, log=print) -> str:
    """The root filesystem an image.json's sessions run on: its base from the image cache
    (remade from the recorded request when the cache lacks it), which must still be the very
    base the image was built on."""
    if meta.get("rootfs") == HOST_ROOTFS:
        return HOST_ROOTFS
    if meta.get("rootfs") == "dockerfile":  # a Harbor task built by buildah (termforge.images.dockerfile)
        key = (meta.get("dockerfile") or {}).get("key", "")
        built = find_built(key, image_cache) if key else None
        if built is None:
            raise TermforgeError(f"{where}: its Dockerfile build {key or '?'} is no longer in the image cache; "
                                 "rebuild the task image")
        return str(built.rootfs)
    base, request = meta.get("base"), meta.get("base_request")
    if not base or not request:
        raise TermforgeError(f"{where}: the image predates base images; rebuild it (termforge build-images)")
    built = ensure_task_base(request["base"], request["apt_packages"], image_cache, log=log)
    if built.digest != base["digest"]:
        raise TermforgeError(
            f"{where}: built on base {base['name']} {base['digest'][:19]}, but that base is now "
            f"{built.digest[:19]} (rebuilt with other package versions); rebuild the task image")
    return str(built.rootfs)


class ApptainerRuntime(apptainer.ApptainerRuntime):
    """Apptainer on the base images of termforge.images, each converted from the image store's
    OCI layout into a SIF."""

    def build_base(self, task: dict, images_dir: Path, timeout: float = 3600) -> tuple[Path, dict]:
        """The SIF of the task's base image (its declared base plus its apt_packages, as the bwrap
        runtime builds it), from the image store's OCI layout; one per base digest."""
        env = task.get("environment", {}) or {}
        built = ensure_task_base(env.get("base") or DEFAULT_BASE, env.get("apt_packages", []), self.image_cache)
        store = self.store or ImageStore(image_store_dir(None, self.image_cache))
        stored = register_base(built, store)[0]
        sif = Path(images_dir) / "bases" / f"{built.record['name']}-{built.digest[7:19]}.sif"
        if not sif.exists() and sif not in self._planned_bases:
            self._planned_bases.add(sif)
            sif.parent.mkdir(parents=True, exist_ok=True)
            res = self._run(self.build_argv(sif, f"oci://{store.root}:{stored.name}"), timeout)
            if not res.ok:
                raise TermforgeError(f"base image {stored.name}: apptainer build failed: {res.tail(500)}")
        return sif, built.ref()


def get_runtime(name: str, **options) -> Runtime:
    """Runtime by config name, on this package's base images."""
    if name == "bwrap":
        return BwrapRuntime(**options)
    if name == "apptainer":
        # Apptainer always runs the image (runtime.rootfs: host is a bwrap-only opt-in).
        options.pop("rootfs", None)
        return ApptainerRuntime(**options)
    raise ConfigError(f"runtime.backend: unknown runtime {name!r} (expected 'bwrap' or 'apptainer')")


__all__ = ["ApptainerRuntime", "BwrapRuntime", "get_runtime", "resolve_rootfs"]
