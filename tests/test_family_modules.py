"""The family package's layout: one module per family, each declaring its axes and its difficulty
knobs once and listed in the registry, and the sandbox programs each family ships as package files (loaded by name,
installed with the package, and valid programs once a family fills them)."""

import ast
import glob
import importlib
import inspect
import json
import os
import pkgutil
import random
import shutil
import string
import subprocess
import sys
import textwrap
import tomllib
from dataclasses import fields
from pathlib import Path

import pytest

import termforge.generate.families as families_pkg
from termforge.axes.vocab import TASK_COMPLEXITIES
from termforge.generate.base import DifficultyKnobs, FamilyAxes, TaskFamily
from termforge.generate.families import FAMILY_MODULES, OPT_IN_MODULES, all_families
from termforge.generate.families.debugging.planted_bugs import plant
from termforge.generate.families.debugging.python_edge_case_fix import PYTHON_PROGRAMS
from termforge.generate.families.debugging.shell_script_fix import SHELL_SCRIPTS

REPO = Path(__file__).resolve().parents[1]
PACKAGE_ROOT = REPO / "src" / "termforge"
FAMILIES_DIR = Path(families_pkg.__file__).parent
TEMPLATE_FILES = sorted(FAMILIES_DIR.glob("*/templates/*/*"))


def _family_classes(module) -> list[type]:
    return list(dict.fromkeys(obj for _, obj in inspect.getmembers(module, inspect.isclass)
                              if issubclass(obj, TaskFamily) and obj.__module__ == module.__name__))


def _all_family_modules() -> dict[str, object]:
    """Every module under the families package that defines a TaskFamily subclass."""
    found = {}
    for info in pkgutil.walk_packages(families_pkg.__path__, prefix=f"{families_pkg.__name__}."):
        module = importlib.import_module(info.name)
        if _family_classes(module):
            found[info.name.removeprefix(f"{families_pkg.__name__}.")] = module
    return found


def test_every_family_module_is_registered_and_holds_one_family():
    registered = FAMILY_MODULES + OPT_IN_MODULES
    assert len(set(registered)) == len(registered)
    found = _all_family_modules()
    assert sorted(found) == sorted(registered), "a family module is missing from families.FAMILY_MODULES"
    for name, module in found.items():
        assert _family_classes(module) == [module.FAMILY], f"{name}: one family per module, exported as FAMILY"
        assert name.rsplit(".", 1)[1] == module.FAMILY.name, f"{name}: the module is named after its family"
    assert [type(f) for f in all_families()] == [found[m].FAMILY for m in registered]


def _family_class_node(module, tree: ast.Module) -> ast.ClassDef:
    return next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == module.FAMILY.__name__)


@pytest.mark.parametrize("module_name", FAMILY_MODULES + OPT_IN_MODULES)
def test_each_family_declares_its_axes_once(module_name):
    module = importlib.import_module(f"{families_pkg.__name__}.{module_name}")
    tree = ast.parse(Path(module.__file__).read_text())
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "FamilyAxes"]
    assert len(calls) == 1, f"{module_name}: declare the axes in one FamilyAxes(...)"
    cls_node = _family_class_node(module, tree)
    assigned = {t.id for s in cls_node.body if isinstance(s, ast.Assign) for t in s.targets if isinstance(t, ast.Name)}
    axis_names = {f.name for f in fields(FamilyAxes)}
    assert assigned & axis_names == set(), f"{module_name}: an axis set beside FamilyAxes: {assigned & axis_names}"
    assert "axes" in assigned and isinstance(module.FAMILY.axes, FamilyAxes)
    for axis in axis_names:
        assert getattr(module.FAMILY, axis) == getattr(module.FAMILY.axes, axis), axis


@pytest.mark.parametrize("module_name", FAMILY_MODULES + OPT_IN_MODULES)
def test_each_family_declares_its_knobs_once(module_name):
    module = importlib.import_module(f"{families_pkg.__name__}.{module_name}")
    tree = ast.parse(Path(module.__file__).read_text())
    calls = [n for n in ast.walk(tree)
             if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "DifficultyKnobs"]
    assert len(calls) == 1, f"{module_name}: declare the difficulty knobs in one DifficultyKnobs(...)"
    declared = [s for s in _family_class_node(module, tree).body if isinstance(s, ast.Assign) and s.value is calls[0]]
    targets = [t.id for s in declared for t in s.targets]
    assert targets == ["knobs"], f"{module_name}: `knobs = DifficultyKnobs(...)` in its class"
    assert isinstance(module.FAMILY.__dict__.get("knobs"), DifficultyKnobs)


@pytest.mark.parametrize("module_name", FAMILY_MODULES + OPT_IN_MODULES)
def test_every_knob_has_one_value_per_complexity_level_and_is_read(module_name):
    module = importlib.import_module(f"{families_pkg.__name__}.{module_name}")
    knobs = module.FAMILY.knobs.per_level
    assert knobs, f"{module_name}: no difficulty knobs"
    tree = ast.parse(Path(module.__file__).read_text())
    # A knob is read as `knobs.NAME` (a level's values) or `per_level["NAME"]` (all of them).
    read = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    read |= {n.slice.value for n in ast.walk(tree) if isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Constant)
             and isinstance(n.value, ast.Attribute) and n.value.attr == "per_level"}
    for name, values in knobs.items():
        assert isinstance(values, tuple) and len(values) == len(TASK_COMPLEXITIES), f"{module_name}.{name}: {values!r}"
        assert name in read, f"{module_name}: knob {name} is declared but build() never reads it"


def test_a_knob_without_one_value_per_level_is_refused():
    with pytest.raises(ValueError, match="one value per task complexity"):
        DifficultyKnobs(rows=(1, 2, 3))
    with pytest.raises(ValueError, match="one value per task complexity"):
        DifficultyKnobs(rows=[1, 2, 3, 4])
    with pytest.raises(ValueError):
        DifficultyKnobs()
    assert DifficultyKnobs(rows=(1, 2, 3, 4), cols=(5, 6, 7, 8)).at(2).__dict__ == {"rows": 3, "cols": 7}


def _inline_per_level_values(source: str) -> list[str]:
    """Per-level values written where they are used: a tuple, list or dict literal indexed by the
    complexity level (a name assigned from complexity_level(), or a parameter of that name), or a
    dict keyed by complexity names."""
    tree = ast.parse(source)
    level_names = {t.id for n in ast.walk(tree) if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call)
                   and getattr(n.value.func, "id", None) == "complexity_level"
                   for t in n.targets if isinstance(t, ast.Name)}
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Subscript) and isinstance(node.value, (ast.Tuple, ast.List, ast.Dict))
                and {n.id for n in ast.walk(node.slice) if isinstance(n, ast.Name)} & level_names):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
        keys = {k.value for k in node.keys if isinstance(k, ast.Constant)} if isinstance(node, ast.Dict) else set()
        if keys & set(TASK_COMPLEXITIES):
            found.append(f"line {node.lineno}: a dict keyed by task complexity")
    return found


@pytest.mark.parametrize("path", sorted(FAMILIES_DIR.rglob("*.py")), ids=lambda p: str(p.relative_to(FAMILIES_DIR)))
def test_no_family_module_writes_per_level_values_inline(path):
    assert _inline_per_level_values(path.read_text()) == [], f"{path.name}: declare these as difficulty knobs"


def test_the_inline_check_sees_the_forms_it_forbids():
    source = textwrap.dedent("""
        lvl = complexity_level(sig)
        n = rng.randint(*((2, 3), (2, 4), (4, 6), (6, 9))[lvl])
        m = [8, 12, 16, 20][lvl - 1]
        size = {"short": 40, "moderate": 60, "complex": 90, "intricate": 120}.get(tc, 60)
        fine = ("a", "b")[flag] + knobs.rows
        """)
    assert sorted(line.split(":")[0] for line in _inline_per_level_values(source)) == ["line 3", "line 4", "line 5"]


# Run in a fresh interpreter: the loader is wrapped before any family module binds it, and this
# session's family classes stay the ones every other test holds. A family loads some files when
# imported and the rest when it builds, so each builds its gallery example too.
_RECORD_LOADS = """
import json, sys
import termforge.generate.families.package_files as package_files
loads, load = [], package_files.family_template
def recording(module, name):
    loads.append([module, name])
    return load(module, name)
package_files.family_template = recording
from termforge.generate.families import all_families
from termforge.generate.gallery import example_signature
from termforge.generate.procedural import build_task
for family in all_families():
    build_task(example_signature(family), [family])
json.dump(loads, sys.stdout)
"""


def _template_loads() -> set[Path]:
    """The template files the family modules load when imported and when each builds a task."""
    res = subprocess.run([sys.executable, "-c", _RECORD_LOADS], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(PACKAGE_ROOT.parent)})
    out = set()
    for module, name in json.loads(res.stdout):
        domain_package, family = module.rsplit(".", 1)
        out.add(Path(importlib.import_module(domain_package).__file__).parent / "templates" / family / name)
    return out


def test_every_template_is_loaded_by_its_family():
    assert TEMPLATE_FILES, "the families ship their sandbox programs as files"
    loaded = _template_loads()
    assert loaded <= set(TEMPLATE_FILES)
    assert set(TEMPLATE_FILES) == loaded, f"template files no family loads: {sorted(set(TEMPLATE_FILES) - loaded)}"


def test_the_build_installs_every_template():
    globs = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["termforge"]
    shipped = {PACKAGE_ROOT / p for g in globs for p in glob.glob(g, root_dir=PACKAGE_ROOT, recursive=True)}
    assert set(TEMPLATE_FILES) <= shipped, f"not in package-data: {sorted(set(TEMPLATE_FILES) - shipped)}"


class _Filled(dict):
    """Any format field filled with a name (a package name, a repr'd value: both parse)."""

    def __missing__(self, key):
        return "filled"


@pytest.mark.parametrize("path", [p for p in TEMPLATE_FILES if p.name.endswith(".py.txt") and "@@" not in p.read_text()],
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_python_templates_are_python(path):
    """A Python template parses as it is (after py_source's dedent: `__CONSTANTS__` and `__SPEC__`
    are names), or, when the family fills it with str.format, once every field is filled."""
    text = textwrap.dedent(path.read_text())
    try:
        ast.parse(text)
    except SyntaxError:
        assert any(field for _, field, _, _ in string.Formatter().parse(text)), f"{path.name} does not parse"
        ast.parse(text.format_map(_Filled()))


def _rendered(builder, seed: int) -> list[tuple[str, str]]:
    """The program a builder makes, with every site fixed and then with each buggy variant alone."""
    prog = builder(random.Random(seed))
    out = [("fixed", plant(prog["template"], prog["sites"], {}))]
    for site in prog["sites"]:
        out += [(f"{site.key}:{i}", plant(prog["template"], prog["sites"], {site.key: bad}))
                for i, bad in enumerate(site.buggy)]
    return out


@pytest.mark.parametrize("name", sorted(PYTHON_PROGRAMS))
def test_python_bug_templates_render_to_programs(name):
    for seed in range(4):
        for variant, source in _rendered(PYTHON_PROGRAMS[name], seed):
            compile(source, f"{name}[{variant}]", "exec")


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("name", sorted(SHELL_SCRIPTS))
def test_shell_bug_templates_render_to_scripts(name):
    for seed in range(4):
        for variant, source in _rendered(SHELL_SCRIPTS[name], seed):
            res = subprocess.run(["bash", "-n"], input=source, capture_output=True, text=True)
            assert res.returncode == 0, f"{name}[{variant}]: {res.stderr}"


def test_axes_set_as_loose_class_attributes_are_refused_with_the_way_to_declare_them():
    import pytest as _pytest

    from termforge.generate.base import TaskFamily

    with _pytest.raises(TypeError, match=r"family Loose: declare its axes once, as `axes = FamilyAxes\(...\)`, "
                                          r"not as class attributes \(name, domains\)"):
        class Loose(TaskFamily):
            name = "loose"
            domains = ("file_operations",)
