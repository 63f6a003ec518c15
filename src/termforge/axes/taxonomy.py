"""Loading and checking the task taxonomy (the axes of a signature).

The package ships its own taxonomy (taxonomy.yaml next to this module); a user may point the run at
their own file. Both must be structurally valid and use only the fixed domain names of
termforge.axes.vocab; only the package file is also held to the house counts (4-7 skill types,
20-40 primitive skills and 5-18 personas per domain), because a user may well want a small
taxonomy for a focused corpus.

The loaded form is a plain dict (JSON-able, order-preserving)::

    {"version": 1, "digest": "<hash of the content>",
     "languages": {"bash": 30.0, ...},
     "domains": {"security": {"skill_types": {"log_forensics": [...], ...},
                              "personas": [...], "anchors": [...]}, ...}}

Domains appear in vocab.DOMAINS order whatever the file's order, so the sampler's draws do not
depend on how a user happened to arrange their file.
"""

from __future__ import annotations

import math
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from termforge.axes.vocab import DOMAINS
from termforge.errors import ConfigError
from termforge.io import stable_hash
from termforge.yamlload import load_yaml

PACKAGE_FILE = "taxonomy.yaml"

# House counts for the package taxonomy (per domain).
SKILL_TYPES_PER_DOMAIN = (4, 7)
SKILLS_PER_DOMAIN = (20, 40)
MIN_SKILLS_PER_SKILL_TYPE = 5
PERSONAS_PER_DOMAIN = (5, 18)
MIN_ANCHORS_PER_DOMAIN = 5

# The sampler draws 3-5 distinct skills from one skill type, so fewer than 3 can never work.
MIN_SKILLS_ANY_TAXONOMY = 3

_TOP_KEYS = {"version", "languages", "domains"}
_DOMAIN_KEYS = {"skill_types", "personas", "anchors"}


def package_taxonomy_path() -> Path:
    return Path(str(resources.files("termforge.axes").joinpath(PACKAGE_FILE)))


def load_taxonomy(path: str | Path | None = None, strict: bool | None = None) -> dict:
    """Read, check and normalise a taxonomy file. None means the package's own file.

    strict (default: only for the package file) also enforces the house counts. Every error is a
    ConfigError whose message starts with the file and the key path at fault.
    """
    if path is None:
        src = package_taxonomy_path()
        text = resources.files("termforge.axes").joinpath(PACKAGE_FILE).read_text(encoding="utf-8")
    else:
        src = Path(path)
        try:
            text = src.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"{src}: cannot read taxonomy file: {exc.strerror or exc}") from exc
    if strict is None:
        strict = path is None or _same_file(src, package_taxonomy_path())
    try:
        raw = load_yaml(text, src)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{src}: not valid YAML: {exc}") from exc
    tax = validate_taxonomy(raw, source=str(src))
    if strict:
        check_house_counts(tax, source=str(src))
    return tax


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


def validate_taxonomy(raw: Any, source: str = "<taxonomy>") -> dict:
    """Structural checks and normalisation shared by every taxonomy, package or user."""

    def fail(key: str, msg: str) -> ConfigError:
        return ConfigError(f"{source}: {key}: {msg}")

    if not isinstance(raw, dict):
        raise fail("(top level)", f"expected a mapping with keys {sorted(_TOP_KEYS)}, got {type(raw).__name__}")
    for key in raw:
        if key not in _TOP_KEYS:
            raise fail(str(key), f"unknown key; expected one of {sorted(_TOP_KEYS)}")
    version = raw.get("version", 1)
    if version != 1 or isinstance(version, bool):
        raise fail("version", f"unsupported taxonomy version {version!r}; expected 1")

    languages = raw.get("languages")
    if not isinstance(languages, dict) or not languages:
        raise fail("languages", "expected a non-empty mapping of language name to weight")
    norm_langs: dict[str, float] = {}
    for name, weight in languages.items():
        if not isinstance(name, str) or not name.strip():
            raise fail("languages", f"language name {name!r} must be a non-empty string")
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight) or weight < 0:
            raise fail(f"languages.{name}", f"weight must be a finite number >= 0, got {weight!r}")
        norm_langs[name] = float(weight)
    if not any(w > 0 for w in norm_langs.values()):
        raise fail("languages", "at least one language needs a positive weight")

    domains = raw.get("domains")
    if not isinstance(domains, dict) or not domains:
        raise fail("domains", "expected a non-empty mapping of domain name to its skill types, personas and anchors")
    for name in domains:
        if name not in DOMAINS:
            raise fail(f"domains.{name}", f"unknown domain {name!r}; expected one of {list(DOMAINS)}")

    norm_domains: dict[str, dict] = {}
    for dom in DOMAINS:
        if dom in domains:
            norm_domains[dom] = _validate_domain(domains[dom], f"domains.{dom}", fail)

    tax = {"version": 1, "languages": norm_langs, "domains": norm_domains}
    tax["digest"] = stable_hash(tax, 16)
    return tax


def _string_list(value: Any, key: str, fail, allow_empty: bool) -> list[str]:
    if value is None and allow_empty:
        return []
    if not isinstance(value, list) or (not value and not allow_empty):
        raise fail(key, "expected a " + ("" if allow_empty else "non-empty ") + "list of strings")
    out: list[str] = []
    for i, item in enumerate(value):
        if not isinstance(item, str) or not item.strip():
            raise fail(f"{key}[{i}]", f"expected a non-empty string, got {item!r}")
        item = " ".join(item.split())
        if item in out:
            raise fail(f"{key}[{i}]", f"duplicate entry {item!r}")
        out.append(item)
    return out


def _validate_domain(body: Any, key: str, fail) -> dict:
    if not isinstance(body, dict):
        raise fail(key, f"expected a mapping with keys {sorted(_DOMAIN_KEYS)}")
    for k in body:
        if k not in _DOMAIN_KEYS:
            raise fail(f"{key}.{k}", f"unknown key; expected one of {sorted(_DOMAIN_KEYS)}")
    skill_types = body.get("skill_types")
    if not isinstance(skill_types, dict) or not skill_types:
        raise fail(f"{key}.skill_types", "expected a non-empty mapping of skill type to primitive skills")
    norm_types: dict[str, list[str]] = {}
    for st, skills in skill_types.items():
        if not isinstance(st, str) or not st.strip():
            raise fail(f"{key}.skill_types", f"skill type name {st!r} must be a non-empty string")
        skills = _string_list(skills, f"{key}.skill_types.{st}", fail, allow_empty=False)
        if len(skills) < MIN_SKILLS_ANY_TAXONOMY:
            raise fail(f"{key}.skill_types.{st}",
                       f"has {len(skills)} skills; a task draws 3-5 from one skill type, so at least "
                       f"{MIN_SKILLS_ANY_TAXONOMY} are needed")
        norm_types[st] = skills
    personas = _string_list(body.get("personas"), f"{key}.personas", fail, allow_empty=False)
    anchors = _string_list(body.get("anchors"), f"{key}.anchors", fail, allow_empty=True)
    return {"skill_types": norm_types, "personas": personas, "anchors": anchors}


def check_house_counts(tax: dict, source: str = "<taxonomy>") -> None:
    """The per-domain counts above, which the shipped taxonomy must meet."""

    def fail(key: str, msg: str) -> ConfigError:
        return ConfigError(f"{source}: {key}: {msg}")

    missing = [d for d in DOMAINS if d not in tax["domains"]]
    if missing:
        raise fail("domains", f"the package taxonomy must define every domain; missing {missing}")
    for dom, body in tax["domains"].items():
        key = f"domains.{dom}"
        n_types = len(body["skill_types"])
        lo, hi = SKILL_TYPES_PER_DOMAIN
        if not lo <= n_types <= hi:
            raise fail(f"{key}.skill_types", f"has {n_types} skill types; expected {lo}-{hi}")
        for st, skills in body["skill_types"].items():
            if len(skills) < MIN_SKILLS_PER_SKILL_TYPE:
                raise fail(f"{key}.skill_types.{st}",
                           f"has {len(skills)} skills; expected at least {MIN_SKILLS_PER_SKILL_TYPE}")
        all_skills = [s for skills in body["skill_types"].values() for s in skills]
        if len(set(all_skills)) != len(all_skills):
            dup = sorted({s for s in all_skills if all_skills.count(s) > 1})
            raise fail(f"{key}.skill_types", f"primitive skills repeated across skill types: {dup}")
        lo, hi = SKILLS_PER_DOMAIN
        if not lo <= len(all_skills) <= hi:
            raise fail(f"{key}.skill_types", f"has {len(all_skills)} primitive skills; expected {lo}-{hi}")
        lo, hi = PERSONAS_PER_DOMAIN
        if not lo <= len(body["personas"]) <= hi:
            raise fail(f"{key}.personas", f"has {len(body['personas'])} personas; expected {lo}-{hi}")
        for i, p in enumerate(body["personas"]):
            if not (p.startswith(("a ", "an ")) and " who " in p):
                raise fail(f"{key}.personas[{i}]", f"{p!r} is not of the form 'a <role> who <context>'")
        if len(body["anchors"]) < MIN_ANCHORS_PER_DOMAIN:
            raise fail(f"{key}.anchors",
                       f"has {len(body['anchors'])} anchors; expected at least {MIN_ANCHORS_PER_DOMAIN}")
