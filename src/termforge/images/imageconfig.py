"""An image's own configuration (the `config` object of its OCI image config: Env, WorkingDir,
User, Entrypoint, Cmd), as a container engine applies it to every process it starts in the image.

Docker starts a container's processes with the image's Env (PATH included: a golang or python
image puts its toolchain there), in its WorkingDir, as its User, and runs its Entrypoint with the
command as arguments. termforge's sandboxes do the same from the same fields, read from the OCI
config in the image store (or a build's pushed config), never guessed from names.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field

from termforge.errors import TermforgeError

# The fields carried from a FROM image into what is built on it.
CARRIED = ("Env", "WorkingDir", "User", "Entrypoint", "Cmd")


@dataclass(frozen=True)
class ImageConfig:
    env: dict[str, str] = field(default_factory=dict)
    workdir: str = ""
    user: str = ""
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()

    @classmethod
    def from_oci(cls, config: dict | None, where: str = "image") -> "ImageConfig":
        """From an OCI image config (the whole blob, or its `config` object)."""
        c = (config or {}).get("config", config) or {}
        if not isinstance(c, dict):
            raise TermforgeError(f"{where}: its image config is not an object")
        env: dict[str, str] = {}
        for item in c.get("Env") or []:
            if not isinstance(item, str) or "=" not in item:
                raise TermforgeError(f"{where}: image config Env entry {item!r} is not KEY=VALUE")
            key, _, value = item.partition("=")
            env[key] = value
        workdir = c.get("WorkingDir") or ""
        if workdir and not posixpath.isabs(workdir):
            raise TermforgeError(f"{where}: image config WorkingDir {workdir!r} is not an absolute path")
        return cls(env, posixpath.normpath(workdir) if workdir else "", str(c.get("User") or ""),
                   tuple(_argv(c.get("Entrypoint"), where, "Entrypoint")), tuple(_argv(c.get("Cmd"), where, "Cmd")))

    def to_record(self) -> dict:
        return {"env": dict(self.env), "workdir": self.workdir, "user": self.user,
                "entrypoint": list(self.entrypoint), "cmd": list(self.cmd)}


def _argv(value, where: str, name: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
        raise TermforgeError(f"{where}: image config {name} is not a list of strings")
    return value


def resolve_user(user: str, rootfs) -> tuple[int, int, str]:
    """The image's User (`name`, `uid`, `name:group`, `uid:gid`) as (uid, gid, name), read from
    the image's own /etc/passwd and /etc/group as the engine does; "" is root. A name the image
    does not define is an error naming it (Docker refuses to start such a container too)."""
    from pathlib import Path

    spec = user or "0"
    who, _, group = spec.partition(":")
    passwd = _table(Path(rootfs) / "etc" / "passwd")
    row = next((r for r in passwd if r[0] == who or (who.isdigit() and r[2] == who)), None)
    if row is None and not who.isdigit():
        raise TermforgeError(f"image User {user!r}: no user {who!r} in the image's /etc/passwd")
    uid = int(who) if who.isdigit() else int(row[2])
    gid = int(row[3]) if row and row[3].isdigit() else uid
    if group:
        groups = _table(Path(rootfs) / "etc" / "group")
        grow = next((r for r in groups if r[0] == group or (group.isdigit() and r[2] == group)), None)
        if grow is None and not group.isdigit():
            raise TermforgeError(f"image User {user!r}: no group {group!r} in the image's /etc/group")
        gid = int(group) if group.isdigit() else int(grow[2])
    return uid, gid, row[0] if row else str(uid)


def _table(path) -> list[list[str]]:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    return [line.split(":") for line in lines if line and not line.startswith("#") and line.count(":") >= 2]


__all__ = ["ImageConfig", "CARRIED", "resolve_user"]
