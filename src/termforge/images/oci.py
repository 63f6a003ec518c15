"""Task images as OCI images: the base image's layer(s) plus the task's /app layer, written into
one OCI image layout (and an OCI archive of it) so the base is stored once however many tasks
use it (docs/images.md). `docker load`, `podman load`, `skopeo`, `umoci` and
`apptainer build task.sif oci-archive://images.oci.tar:termforge/task:<id>` read them.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from termforge.errors import TermforgeError
from termforge.images.build import BUILD_TIMEOUT_SEC, _run, ensure_task_base
from termforge.images.store import ImageStore, epoch_of, register_base
from termforge.io import read_json

TASK_IMAGE_PREFIX = "termforge/task"


def task_image_name(task_id: str) -> str:
    return f"{TASK_IMAGE_PREFIX}:{task_id}"


def write_task_layer(image_dir: Path, out: Path, epoch: int) -> None:
    """The task layer (image_dir/layer) as the /app of an OCI layer: owned by root, as a Docker
    build running setup.sh as root would leave it, every time clamped to `epoch`."""
    _run(["tar", "--create", f"--file={out}", f"--directory={image_dir}", "--transform=s,^layer,app,",
          "--sort=name", "--format=pax", "--pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime",
          f"--mtime=@{epoch}", "--clamp-mtime", "--owner=0", "--group=0", "--numeric-owner", "layer"],
         BUILD_TIMEOUT_SEC, f"task layer of {image_dir}")


def _base_in_store(meta: dict, store: ImageStore, where: str):
    base = meta["base"]
    for name in base.get("names") or [f"termforge/derived:{base['name'].replace('+', '-')}"]:
        image = store.get(name)
        if image is not None and image.labels.get("org.termforge.base.digest") == base["digest"]:
            return image
    built = ensure_task_base(meta["base_request"]["base"], meta["base_request"]["apt_packages"])
    if built.digest != base["digest"]:
        raise TermforgeError(f"{where}: built on base {base['name']} {base['digest'][:19]}, which is no longer "
                             "in the image cache or store; rebuild the task image")
    return register_base(built, store)[0]


def export_task_images(images: list[tuple[str, Path]], out_dir: Path, store: ImageStore | None = None,
                       archive: bool | Path = True) -> dict:
    """Write each (task id, built image dir) as `termforge/task:<id>` into the OCI layout
    out_dir (base images included under their own names), and an OCI archive of it: out_dir +
    ".tar", or the path `archive` names (False: none)."""
    store = store or ImageStore()
    out_dir = Path(out_dir)
    layout = ImageStore(out_dir)
    written = {}
    for task_id, image_dir in images:
        where = f"task {task_id}"
        meta = read_json(Path(image_dir) / "image.json")
        if meta.get("rootfs") != "image" or not meta.get("base"):
            raise TermforgeError(f"{where}: its image was built on the host's /usr (runtime.rootfs: host), so "
                                 "there is no image to export; rebuild it with runtime.rootfs: image")
        base = layout.copy_image(store, _base_in_store(meta, store, where).name)
        epoch = epoch_of(base.created)
        with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
            layer = Path(tmp) / "layer.tar"
            write_task_layer(Path(image_dir), layer, epoch)
            image = layout.add_layers(
                task_image_name(task_id), [(layer, None)], base=base, created=epoch, workdir="/app",
                architecture=base.config.get("architecture", "amd64"),
                labels={"org.termforge.task.id": task_id, "org.termforge.task.image-digest": meta["image_digest"],
                        "org.termforge.task.layer-digest": meta["layer_digest"]},
                history=[f"termforge: task {task_id} /app (setup.sh on {base.name})"])
        written[task_id] = {"name": image.name, "manifest_digest": image.digest, "base": base.name,
                            "base_manifest_digest": base.digest, "layers": [la["digest"] for la in image.layers]}
    result = {"layout": str(out_dir), "images": written}
    if archive:
        tar = Path(archive) if not isinstance(archive, bool) else out_dir.with_name(out_dir.name + ".tar")
        tmp = tar.with_name(f".{tar.name}.tmp")
        names = sorted(p.name for p in out_dir.iterdir() if not p.name.startswith("."))
        _run(["tar", "--create", f"--file={tmp}", f"--directory={out_dir}", "--sort=name", "--format=pax",
              "--pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime", "--mtime=@0",
              "--owner=0", "--group=0", "--numeric-owner", "--", *names], BUILD_TIMEOUT_SEC, "OCI archive")
        os.replace(tmp, tar)
        result["archive"] = str(tar)
    return result


__all__ = ["export_task_images", "task_image_name", "write_task_layer", "TASK_IMAGE_PREFIX"]
