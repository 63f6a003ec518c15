"""Harbor registry JSON: a dataset's task list, resolved against local checkouts of the task
repositories (docs/terminal-bench.md, "Datasets").

A registry file (Harbor's registry.json; harbor/models/registry.py Registry.from_path) is a JSON
list of datasets, each {name, version, description, tasks: [{name, git_url, git_commit_id,
path}]}. Harbor clones each git_url at git_commit_id and takes the task at `path`; a machine
without that network (a cluster) has the repositories checked out already, so here each git_url
maps to a local folder, and a checkout at another commit than the registry pins is refused for
its tasks (the tasks would not be the dataset's), each with one line.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from termforge.containment import contained
from termforge.errors import InputError, TermforgeError
from termforge.evals.harbor_tasks import BrokenTask, HarborTask, HarborTaskError, load_harbor_task


def _datasets(registry: Path) -> list[dict]:
    try:
        rows = json.loads(Path(registry).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise TermforgeError(f"Harbor registry {registry}: unreadable ({exc})") from None
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise TermforgeError(f"Harbor registry {registry}: expected a JSON list of datasets")
    return rows


def dataset_spec(registry: Path, dataset: str) -> dict:
    """The dataset `NAME@VERSION` (or NAME, when one version is listed) of a registry file."""
    name, _, version = dataset.partition("@")
    rows = [r for r in _datasets(registry) if r.get("name") == name and (not version or str(r.get("version")) == version)]
    if len(rows) != 1:
        have = sorted(f"{r.get('name')}@{r.get('version')}" for r in _datasets(registry))
        what = "no dataset" if not rows else f"{len(rows)} versions of dataset"
        raise TermforgeError(f"Harbor registry {registry}: {what} {dataset!r} (it lists {', '.join(have[:10]) or 'none'})")
    spec = rows[0]
    if not isinstance(spec.get("tasks"), list):
        raise TermforgeError(f"Harbor registry {registry}: dataset {dataset} has no task list")
    return spec


def _head(checkout: Path) -> str | None:
    if not (checkout / ".git").exists():
        return None
    res = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=60)
    return res.stdout.strip() if res.returncode == 0 else None


def load_registry_dataset(registry: str | Path, dataset: str,
                          checkouts: Path | dict[str, Path]) -> tuple[list[HarborTask], list[BrokenTask]]:
    """The tasks a registry's dataset lists, read from local checkouts: `checkouts` is one folder
    (every git_url's checkout, or the folder of tasks without a git_url) or {git_url: folder}.
    Each task that cannot be had is a BrokenTask with its reason; the others load as Harbor names them."""
    registry = Path(registry)
    spec = dataset_spec(registry, dataset)
    tasks, broken = [], []
    heads: dict[Path, str | None] = {}
    for entry in spec["tasks"]:
        name = str(entry.get("name") or entry.get("path") or "?")
        where = f"Harbor registry {registry} dataset {dataset} task {name}"
        url, commit, rel = entry.get("git_url"), entry.get("git_commit_id"), entry.get("path")
        root = checkouts.get(url) if isinstance(checkouts, dict) else Path(checkouts)
        if root is None:
            broken.append(BrokenTask(name, Path(str(rel)), f"{where}: no local checkout of {url} was given"))
            continue
        root = Path(root)
        if commit and url:
            head = heads.setdefault(root, _head(root))
            if head is not None and head != commit:
                broken.append(BrokenTask(name, root, f"{where}: the checkout {root} is at {head[:12]}, the registry "
                                                     f"pins {str(commit)[:12]}"))
                continue
        try:
            task_dir = contained(root, str(rel)) if rel not in (None, "", ".") else root
            task = load_harbor_task(task_dir)
        except InputError as exc:
            broken.append(BrokenTask(name, root, f"{where}: path {rel!r}: {exc.problem}"))
            continue
        except HarborTaskError as exc:
            broken.append(BrokenTask(name, root / str(rel), f"{where}: {exc}"))
            continue
        tasks.append(task)
    return tasks, broken


__all__ = ["dataset_spec", "load_registry_dataset"]
