"""Images: base image declarations, their builds into the per-user cache, the local store of
named OCI images, and the build-images stage (docs/images.md).

- declarations: one YAML file per base under images/bases/ (package data)
- store: the per-user image cache's location and the local OCI store; a Dockerfile's FROM
  resolved to a declared or stored base (find_base_for)
- build: mmdebstrap / apt builds, cache, lock files, reproducible layers
- dockerfile: Harbor tasks' Dockerfile builds (buildah)
- runtimes: termforge.runtime's sandboxes handed these base images (get_runtime)
- stage: the build-images stage (every task image of one shard)

Imports run declarations <- store <- build <- dockerfile <- runtimes <- stage.
"""

from termforge.images.build import BuiltBase, built_bases, ensure_base, ensure_task_base, find_built
from termforge.images.declarations import (DEFAULT_BASE, BaseDecl, declaration, declared_packages, derive,
                                           load_declarations, normalize_name)
from termforge.images.store import find_base_for, image_cache_dir


def run_build_shard(*args, **kwargs):
    from termforge.images.stage import run_build_shard as run

    return run(*args, **kwargs)


__all__ = ["BaseDecl", "BuiltBase", "DEFAULT_BASE", "built_bases", "declaration", "declared_packages", "derive",
           "ensure_base", "ensure_task_base", "find_base_for", "find_built", "image_cache_dir", "load_declarations",
           "normalize_name", "run_build_shard"]
