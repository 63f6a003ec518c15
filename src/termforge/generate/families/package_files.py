"""The files a family ships beside its module: the programs its tasks run in the sandbox (oracles,
program templates, fuzz harnesses), kept as package data under <domain>/templates/<family>/ rather
than as strings in the module, so they read, diff and test as the programs they are.

The files end in .txt (checker.c.txt, oracle.py.txt): many hold placeholders a family fills before
the program runs, and none of them is a module of this package to import or collect."""

from __future__ import annotations

from importlib import resources


def family_template(family_module: str, file_name: str) -> str:
    """The text of templates/<family>/<file_name> beside the family module named `family_module`
    (its __name__: termforge.generate.families.<domain>.<family>)."""
    domain_package, family = family_module.rsplit(".", 1)
    return resources.files(domain_package).joinpath("templates", family, file_name).read_text(encoding="utf-8")


def template_names(family_module: str) -> list[str]:
    """Every file in the family's templates folder (none when it has no folder)."""
    domain_package, family = family_module.rsplit(".", 1)
    folder = resources.files(domain_package).joinpath("templates", family)
    return sorted(entry.name for entry in folder.iterdir()) if folder.is_dir() else []
