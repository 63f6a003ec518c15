"""Base image declarations: one small YAML file per base under images/bases/ (package data).

A *root* base names a Debian suite, its apt sources, the mmdebstrap variant and packages; a
*layered* base names another base (`from:`) and the packages apt adds on top of it. A task's
extra `apt_packages` give a *derived* base: its task base plus those packages, declared in
memory (`derive`) and content-addressed by the package set, so every task asking for the same
set shares one.

Keys (docs/images.md):
  description         one line, shown by `termforge images list`
  names               the names the base is stored under (`termforge images list`; Dockerfiles
                      FROM them): e.g. debian:bookworm-slim
  suite, variant      root bases: Debian suite and mmdebstrap variant (minbase keeps it small)
  sources             root bases: apt source lines (the pinned mirror)
  slim                root bases: Docker's slim dpkg path excludes (no man pages, docs, locales)
  source_date_epoch   root bases: every file time is clamped to it, so digests name content
  from                layered bases: the parent base's name
  packages            Debian packages on top of the variant (or the parent)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import yaml

from termforge.errors import ConfigError, TermforgeError
from termforge.io import stable_hash
from termforge.yamlload import load_yaml

BASES_DIR = Path(__file__).resolve().parent / "bases"
# Programs the builds run in their namespaces (package data, read by name).
SCRIPTS_DIR = Path(__file__).resolve().parent / "scripts"
# The base every termforge task builds on unless its task.json names another.
DEFAULT_BASE = "termforge-bookworm"
# Debian's package name rule (Policy 5.6.1), optionally with =version: nothing else reaches apt.
PACKAGE_RE = re.compile(r"^[a-z0-9][a-z0-9+.-]+(=[A-Za-z0-9.+~:-]+)?$")
VARIANTS = ("minbase", "essential", "apt", "required", "important", "standard")
ROOT_KEYS = {"description", "names", "suite", "variant", "sources", "slim", "source_date_epoch", "packages"}
LAYERED_KEYS = {"description", "names", "from", "packages"}
# Docker's debian:*-slim dpkg excludes (debuerreotype's slimify list).
SLIM_DPKG_OPTIONS = (
    "path-exclude=/usr/share/doc/*", "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/man/*", "path-exclude=/usr/share/groff/*", "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/lintian/*", "path-exclude=/usr/share/linda/*", "path-exclude=/usr/share/locale/*",
)


@dataclass(frozen=True)
class BaseDecl:
    name: str
    description: str = ""
    names: tuple[str, ...] = ()
    parent: "BaseDecl | None" = None
    packages: tuple[str, ...] = ()
    suite: str = ""
    variant: str = "minbase"
    sources: tuple[str, ...] = ()
    slim: bool = False
    source_date_epoch: int = 0
    derived: bool = False  # made for a task's apt_packages, not declared in a file
    source: str = field(default="", compare=False)  # the file it was read from
    # A root base taken from the image store (a FROM image someone added), not built here:
    # its store name and manifest digest.
    image: str = ""
    image_digest: str = ""

    @property
    def root(self) -> "BaseDecl":
        return self.parent.root if self.parent else self

    @property
    def epoch(self) -> int:
        return self.root.source_date_epoch

    def own(self) -> dict:
        """What this declaration itself says (a layered base's parent enters its key as the
        parent's built digest, not as text)."""
        if self.parent:
            return {"from": self.parent.name, "packages": sorted(self.packages)}
        if self.image:
            return {"image": self.image, "manifest": self.image_digest, "packages": sorted(self.packages)}
        return {"suite": self.suite, "variant": self.variant, "sources": list(self.sources), "slim": self.slim,
                "source_date_epoch": self.source_date_epoch, "packages": sorted(self.packages)}

    def all_packages(self) -> set[str]:
        """Every package named along the chain (what a from-scratch mmdebstrap would --include)."""
        return set(self.packages) | (self.parent.all_packages() if self.parent else set())

    def flattened(self) -> "BaseDecl":
        """The same content as one root declaration (for builders that cannot layer with apt)."""
        root = self.root
        return BaseDecl(self.name, self.description, self.names, None, tuple(sorted(self.all_packages())),
                        root.suite, root.variant, root.sources, root.slim, root.source_date_epoch, self.derived,
                        self.source)


def _problem(path: Path, msg: str) -> ConfigError:
    return ConfigError(f"base image declaration {path}: {msg}")


def _packages(path: Path, raw) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(p, str) for p in raw):
        raise _problem(path, "packages: expected a list of Debian package names")
    bad = [p for p in raw if not PACKAGE_RE.match(p)]
    if bad:
        raise _problem(path, f"packages: not Debian package names: {bad}")
    return tuple(sorted(set(raw)))


def _read(path: Path) -> dict:
    try:
        raw = load_yaml(path.read_text(), path)
    except (OSError, yaml.YAMLError) as exc:
        raise _problem(path, f"cannot be read as YAML ({exc})") from None
    if not isinstance(raw, dict):
        raise _problem(path, "expected a mapping of keys")
    return raw


def load_declarations(bases_dir: Path = BASES_DIR) -> dict[str, BaseDecl]:
    """Every declared base by name (the file's stem), parents resolved; bad files raise one
    ConfigError naming the file and the key."""
    return _load(Path(bases_dir).resolve())


@lru_cache(maxsize=8)
def _load(bases_dir: Path) -> dict[str, BaseDecl]:
    raws = {p.stem: (p, _read(p)) for p in sorted(Path(bases_dir).glob("*.yaml"))}
    done: dict[str, BaseDecl] = {}

    def build(name: str, seen: tuple[str, ...]) -> BaseDecl:
        if name in done:
            return done[name]
        path, raw = raws[name]
        layered = "from" in raw
        unknown = set(raw) - (LAYERED_KEYS if layered else ROOT_KEYS)
        if unknown:
            raise _problem(path, f"unknown keys {sorted(unknown)} for a {'layered' if layered else 'root'} base")
        names = raw.get("names") or []
        if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
            raise _problem(path, "names: expected a list of image names")
        common = dict(name=name, description=str(raw.get("description", "")), names=tuple(names),
                      packages=_packages(path, raw.get("packages")), source=str(path))
        if layered:
            parent = raw["from"]
            if parent not in raws:
                raise _problem(path, f"from: no base named {parent!r} (declared: {sorted(raws)})")
            if parent in seen:
                raise _problem(path, f"from: {parent!r} makes a cycle")
            decl = BaseDecl(parent=build(parent, seen + (name,)), **common)
        else:
            for key in ("suite", "sources", "source_date_epoch"):
                if key not in raw:
                    raise _problem(path, f"{key}: required for a root base")
            sources = raw["sources"]
            if not isinstance(sources, list) or not sources or not all(
                    isinstance(s, str) and s.startswith("deb ") for s in sources):
                raise _problem(path, "sources: expected a list of apt source lines (deb URL SUITE COMPONENTS)")
            if raw.get("variant", "minbase") not in VARIANTS:
                raise _problem(path, f"variant: expected one of {VARIANTS}")
            if not isinstance(raw["source_date_epoch"], int) or raw["source_date_epoch"] <= 0:
                raise _problem(path, "source_date_epoch: expected a positive integer (seconds)")
            decl = BaseDecl(suite=str(raw["suite"]), variant=raw.get("variant", "minbase"), sources=tuple(sources),
                            slim=bool(raw.get("slim", False)), source_date_epoch=raw["source_date_epoch"], **common)
        done[name] = decl
        return decl

    for name in raws:
        build(name, ())
    taken: dict[str, str] = {}
    for decl in done.values():
        for n in decl.names:
            if normalize_name(n) in taken:
                raise _problem(Path(decl.source), f"names: {n!r} is also a name of {taken[normalize_name(n)]}")
            taken[normalize_name(n)] = decl.name
    return done


def normalize_name(ref: str) -> str:
    """An image reference as Docker resolves it, shortened: `docker.io/library/debian:12` and
    `debian:12` are the same image; a name without a tag means `:latest`."""
    ref = ref.strip()
    for prefix in ("docker.io/library/", "index.docker.io/library/", "docker.io/", "index.docker.io/"):
        if ref.startswith(prefix):
            ref = ref[len(prefix):]
            break
    if "@" in ref:
        return ref
    last = ref.rsplit("/", 1)[-1]
    return ref if ":" in last else ref + ":latest"


def declaration(name: str, bases_dir: Path = BASES_DIR) -> BaseDecl:
    """A declared base by its file name or any of its image names."""
    decls = load_declarations(bases_dir)
    if name in decls:
        return decls[name]
    wanted = normalize_name(name)
    for decl in decls.values():
        if any(normalize_name(n) == wanted for n in decl.names):
            return decl
    raise TermforgeError(f"no base image declaration named {name!r} (declared: "
                         f"{', '.join(sorted(d.name for d in decls.values()))}; their image names: "
                         f"{', '.join(sorted(n for d in decls.values() for n in d.names))})")





def check_packages(packages, where: str) -> tuple[str, ...]:
    bad = [p for p in packages if not isinstance(p, str) or not PACKAGE_RE.match(p)]
    if bad:
        raise TermforgeError(f"{where}: not Debian package names: {bad}")
    return tuple(sorted(set(packages)))


def derive(parent: BaseDecl, packages, installed=()) -> BaseDecl:
    """The base a task with extra `packages` runs on: `parent` itself when they add nothing the
    chain names or the built parent already has (`installed`: its lock's package names), else a
    derived base named by the package set."""
    have = parent.all_packages() | set(installed)
    extra = tuple(sorted(p for p in check_packages(packages, f"base {parent.name}") if p not in have))
    if not extra:
        return parent
    return BaseDecl(f"{parent.name}+{stable_hash(extra, 10)}", f"{parent.name} + {' '.join(extra)}", (), parent,
                    extra, derived=True)


def declared_packages(name: str = DEFAULT_BASE) -> tuple[str, ...]:
    """The packages a declared base names along its chain (what a task may take for granted;
    the built base's lock lists them all, dependencies included)."""
    return tuple(sorted(declaration(name).all_packages()))


__all__ = ["BaseDecl", "load_declarations", "declaration", "derive", "declared_packages", "normalize_name",
           "check_packages", "DEFAULT_BASE", "BASES_DIR", "SLIM_DPKG_OPTIONS"]
