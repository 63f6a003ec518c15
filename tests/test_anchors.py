"""Anchors bear load (termforge.generate.anchors): a requested anchor packs the task's inputs in
its own format, so ignoring it fails the final test, and the metadata says so only when it did.

Every anchor runs in a real sandbox on an invented family whose deliverable is a census of /app
(every path, type, mode and content hash): the oracle scores 1 only if unpacking restores /app
exactly, and a solution that ignores the anchor (the same family's oracle without the unpacking)
scores 0 on the anchored task.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil

import pytest

from conftest import make_signature, needs_bwrap
from termforge.axes.sampler import anchor_honour, draw_signatures
from termforge.axes.taxonomy import load_taxonomy
from termforge.generate.anchors import (ANCHORS, MIN_SECRET_LEN, anchor_plan, anchorless_corpus_kinds,
                                        apply_anchor, hidden_strings, load_bearing_anchors_by_domain)
from termforge.generate.base import (FamilyAxes, TaskFamily, TaskSpec, bash_script, instruction_frame,
                                     pytest_module)
from termforge.generate.families import default_families, family_by_name
from termforge.generate.procedural import build_task, generate_task, task_json
from termforge.grading.taskcheck import check_soundness
from termforge.grading.verifier import run_oracle, run_verifier
from termforge.images.runtimes import BwrapRuntime
from termforge.quality import validate as quality_validate
from termforge.runtime.base import Limits

LIMITS = Limits(wall_sec=120, cpu_sec=120, memory_mb=4096)

# Walks /app (leaving the packed form's inbox out) and writes one line per entry.
CENSUS = r'''
import hashlib, os, stat
rows = []
for d, dirs, files in os.walk("/app"):
    dirs[:] = sorted(x for x in dirs if os.path.join(d, x) != "/app/inbox")
    for name in sorted(dirs) + sorted(files):
        full = os.path.join(d, name)
        rel = os.path.relpath(full, "/app")
        if rel == "census.txt":
            continue
        st = os.lstat(full)
        if stat.S_ISLNK(st.st_mode):
            rows.append(f"{rel}\tsymlink\t{os.readlink(full)}")
        elif stat.S_ISDIR(st.st_mode):
            rows.append(f"{rel}\tdir\t{stat.S_IMODE(st.st_mode):04o}")
        else:
            digest = hashlib.sha256(open(full, "rb").read()).hexdigest()
            rows.append(f"{rel}\tfile\t{stat.S_IMODE(st.st_mode):04o}\t{digest}")
open("/app/census.txt", "w").write("\n".join(sorted(rows)) + "\n")
'''


class TreeCensus(TaskFamily):
    """An invented family: /app holds a tree with awkward entries, the deliverable lists them all.
    `git_safe`: only modes git keeps (0644, 0755) and no empty directory."""

    axes = FamilyAxes(name="tree_census", domains=("file_operations",), verifier_kinds=("exact_text",),
                      fixture_kinds=("text_only",))
    git_safe = False

    def entries(self, rng: random.Random) -> list[tuple]:
        blob = bytes(range(256)) * rng.randint(1, 4) + bytes([rng.randrange(256) for _ in range(64)])
        # Group- and world-writable modes too: a restore that lets the umask in loses them.
        modes = (0o644, 0o755) if self.git_safe else (0o600, 0o666, 0o444, 0o777, 0o664)
        out = [("tree", "dir", 0o755, None), ("tree/nested", "dir", 0o755 if self.git_safe else 0o775, None),
               ("tree/nested/deep", "dir", 0o755, None),
               ("tree/blob.bin", "file", modes[rng.randrange(len(modes))], blob),
               ("tree/nested/deep/notes with spaces.txt", "file", 0o644, "héllo\nwörld\n".encode()),
               ("tree/.hidden", "file", modes[-1], b"dot\n"),
               ("tree/nested/shared.cfg", "file", modes[1], b"k=v\n"),
               ("tree/run.sh", "file", 0o755, b"#!/bin/sh\necho hi\n"),
               ("tree/link-to-blob", "symlink", None, "blob.bin")]
        if not self.git_safe:
            out.append(("tree/empty", "dir", 0o700, None))
        return out

    def build(self, sig: dict, rng: random.Random) -> TaskSpec:
        entries = self.entries(rng)
        fixtures = {path: data for path, kind, _, data in entries if kind == "file"}
        setup = ["mkdir -p /app/tree"]
        for path, kind, mode, data in entries:
            if kind == "dir":
                setup.append(f"mkdir -p '/app/{path}'")
            elif kind == "file":
                setup.append(f"cp '/tmp/env/fixtures/{path}' '/app/{path}'")
            else:
                setup.append(f"ln -s '{data}' '/app/{path}'")
        # Modes last, deepest first, so a restrictive directory mode never blocks its own setup.
        setup += [f"chmod {mode:04o} '/app/{path}'" for path, kind, mode, _ in
                  sorted(entries, key=lambda e: -e[0].count("/")) if kind != "symlink"]
        rows = []
        for path, kind, mode, data in entries:
            if kind == "symlink":
                rows.append(f"{path}\tsymlink\t{data}")
            elif kind == "dir":
                rows.append(f"{path}\tdir\t{mode:04o}")
            else:
                rows.append(f"{path}\tfile\t{mode:04o}\t{hashlib.sha256(data).hexdigest()}")
        expected = "\n".join(sorted(rows)) + "\n"
        return TaskSpec(
            instruction=instruction_frame(sig, "Census of a tree", "List every entry under `/app/tree`.",
                                          ["`/app/census.txt`: one line per entry"]),
            setup_sh=bash_script("\n".join(setup)),
            test_initial=pytest_module('''
                import os

                def test_tree_is_there():
                    assert os.path.isdir("/app/tree")
                '''),
            test_final=pytest_module(f'''
                EXPECTED = {expected!r}

                def test_census_matches_the_tree_exactly():
                    assert open("/app/census.txt").read() == EXPECTED
                '''),
            solve_sh=bash_script(f"python3 - <<'CENSUS'\n{CENSUS.strip()}\nCENSUS"),
            truth={"census": expected}, verifier_kind="exact_text", fixture_kind="text_only",
            fixtures=fixtures, output_paths=["/app/census.txt"])


class GitSafeTreeCensus(TreeCensus):
    axes = FamilyAxes(name="tree_census_git_safe", domains=("file_operations",), verifier_kinds=("exact_text",),
                      fixture_kinds=("text_only",))
    git_safe = True


def _census_family(anchor: str) -> TreeCensus:
    return GitSafeTreeCensus() if anchor == "git" else TreeCensus()


def _sig(anchor, index=3, **extra):
    return make_signature(index, "file_operations", "exact_text", "text_only", anchor=anchor, **extra)


@needs_bwrap
@pytest.mark.parametrize("anchor", sorted(ANCHORS))
def test_anchor_restores_app_exactly_and_ignoring_it_fails(anchor, tmp_path):
    fam = _census_family(anchor)
    sig = _sig(anchor)
    task_dir = generate_task(sig, tmp_path / "tasks", families=[fam])
    assert json.loads((task_dir / "task.json").read_text())["honoured"]["anchor"] is True
    runtime = BwrapRuntime()
    report = check_soundness(task_dir, runtime, tmp_path / "images", LIMITS)
    assert report.ok, f"{anchor}: {report.failed_check}: {report.reason}\n{report.evidence}"
    # The same family's oracle without the unpacking: it walks an /app that holds only the packed form.
    naive = tmp_path / "naive" / task_dir.name
    shutil.copytree(task_dir, naive)
    unanchored = build_task({**sig, "anchor": None}, families=[fam]).spec
    (naive / "solution" / "solve.sh").write_text(unanchored.solve_sh)
    build = runtime.build(task_dir, tmp_path / "images")
    with runtime.start(build.image, LIMITS) as session:
        assert run_oracle(session, naive, timeout=LIMITS.wall_sec).exit_code == 0
        assert run_verifier(session, task_dir, timeout=LIMITS.wall_sec).reward == 0.0


@needs_bwrap
def test_a_real_family_fails_when_the_anchor_is_ignored(tmp_path):
    fam = family_by_name("decay_half_life_fit")
    sig = make_signature(11, fam.domains[0], fam.verifier_kinds[0], "text_only", anchor="NumPy")
    task_dir = generate_task(sig, tmp_path / "tasks", families=[fam])
    runtime = BwrapRuntime()
    report = check_soundness(task_dir, runtime, tmp_path / "images", LIMITS)
    assert report.ok, f"{report.failed_check}: {report.reason}\n{report.evidence}"
    naive = tmp_path / "naive" / task_dir.name
    shutil.copytree(task_dir, naive)
    (naive / "solution" / "solve.sh").write_text(build_task({**sig, "anchor": None}, families=[fam]).spec.solve_sh)
    with runtime.start(runtime.build(task_dir, tmp_path / "images").image, LIMITS) as session:
        run_oracle(session, naive, timeout=LIMITS.wall_sec)
        assert run_verifier(session, task_dir, timeout=LIMITS.wall_sec).reward == 0.0


@needs_bwrap
def test_git_refuses_a_tree_it_cannot_keep(tmp_path):
    task_dir = generate_task(_sig("git"), tmp_path / "tasks", families=[TreeCensus()])  # has an empty directory
    build = BwrapRuntime().build(task_dir, tmp_path / "images")
    assert not build.ok
    assert "git keeps no empty directory" in build.log


@pytest.mark.parametrize("anchor", sorted(ANCHORS))
def test_anchored_task_is_the_same_bytes_every_time(anchor, tmp_path):
    a = generate_task(_sig(anchor, 5), tmp_path / "a", families=[_census_family(anchor)])
    b = generate_task(_sig(anchor, 5), tmp_path / "b", families=[_census_family(anchor)])
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    for rel in files:
        assert (a / rel).read_bytes() == (b / rel).read_bytes(), rel


@pytest.mark.parametrize("anchor", sorted(ANCHORS))
def test_the_anchor_changes_setup_oracle_and_initial_test_but_not_the_family_task(anchor):
    fam = _census_family(anchor)
    with_it = build_task(_sig(anchor, 8), families=[fam])
    without = build_task({**_sig(anchor, 8), "anchor": None}, families=[fam])
    # A different signature id draws different seeds: compare against the same seed's own build.
    rebuilt = fam.build({**_sig(anchor, 8), "anchor": None}, random.Random(with_it.seed))
    assert with_it.spec.test_final == rebuilt.test_final and with_it.spec.truth == rebuilt.truth
    assert with_it.spec.setup_sh.startswith(rebuilt.setup_sh.rstrip("\n"))
    assert with_it.spec.solve_sh != rebuilt.solve_sh and with_it.spec.test_initial != rebuilt.test_initial
    assert f"## Inputs packed with {anchor}" in with_it.spec.instruction
    assert "Inputs packed with" not in without.spec.instruction
    assert set(ANCHORS[anchor].apt_packages) <= set(with_it.spec.apt_packages)


@pytest.mark.parametrize("anchor, family, why", [
    ("nftables", "log_level_filter", "no transformation makes nftables bear load"),
    ("zstd", "one_step_file_task", "a one-command episode has no turn to unpack in"),
])
def test_an_anchor_not_applied_is_not_claimed(anchor, family, why):
    fam = family_by_name(family)
    sig = make_signature(2, fam.domains[0], fam.verifier_kinds[0], fam.fixture_kinds[0], anchor=anchor)
    assert anchor_plan(sig, fam) is None, why
    built = build_task(sig, families=[fam])
    meta = task_json(sig, built, {})
    assert meta["honoured"]["anchor"] is False and meta["actual"]["anchor"] is None
    assert {"axis": "anchor", "requested": anchor, "actual": None} in meta["mismatch"]
    assert anchor not in built.spec.instruction and "Inputs packed with" not in built.spec.instruction


def test_apply_anchor_without_an_anchor_is_the_identity():
    spec = TreeCensus().build(_sig(None), random.Random(1))
    assert apply_anchor(spec, None, random.Random(1)) is spec


def test_family_declared_anchors_are_not_claimed_without_the_transformation():
    # The audited bug: a family that declares an anchor was recorded as honouring it, though the
    # anchor shaped nothing. A declaration alone now claims nothing, and the task says nothing of it.
    class DeclaresFfmpeg(TreeCensus):
        axes = FamilyAxes(name="tree_census_declaring_ffmpeg", domains=("file_operations",),
                          verifier_kinds=("exact_text",), fixture_kinds=("text_only",), anchors=("FFmpeg",))

    sig = _sig("FFmpeg", 4)
    built = build_task(sig, families=[DeclaresFfmpeg()])
    meta = task_json(sig, built, {})
    assert meta["honoured"]["anchor"] is False and meta["actual"]["anchor"] is None
    assert "FFmpeg" not in built.spec.instruction
    # The same family asked for an anchor that bears load claims it, and the task changes with it.
    sig = _sig("zstd", 4)
    meta = task_json(sig, build_task(sig, families=[DeclaresFfmpeg()]), {})
    assert meta["honoured"]["anchor"] is True and meta["actual"]["anchor"] == "zstd"


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_sampler_asks_each_domain_only_for_anchors_it_can_bear(seed):
    tax = load_taxonomy()
    families = default_families()
    bearable = load_bearing_anchors_by_domain(tax, families)
    mix = {"legacy": 0.4, "rl_v2": 0.4, "calibration": 0.2}
    draw = draw_signatures(1500, seed, mix, tax, anchor_prob=0.5, anchors_by_domain=bearable,
                           anchorless_kinds=anchorless_corpus_kinds(families))
    free = draw_signatures(1500, seed, mix, tax, anchor_prob=0.5)
    for s, f, requested in zip(draw.signatures, free.signatures, draw.requested_anchors):
        assert {k: v for k, v in s.items() if k not in ("anchor", "id")} == \
            {k: v for k, v in f.items() if k not in ("anchor", "id")}
        assert requested == f["anchor"]
        if s["anchor"]:
            assert s["anchor"] in bearable[s["domain"]] and s["corpus_kind"] != "calibration"
            assert anchor_plan(s, build_task(s).family) is not None
        else:
            # The same coin: an anchor is dropped only where none can bear load.
            assert not f["anchor"] or not bearable[s["domain"]] or s["corpus_kind"] == "calibration"
    stats = anchor_honour(draw, tax)
    assert stats["asked"] == sum(1 for s in draw.signatures if s["anchor"])
    assert stats["requested"] - stats["asked"] == sum(stats["dropped_by_domain"].values()) > 0
    assert set(stats["never_drawn_by_domain"]["debugging"]) == set(tax["domains"]["debugging"]["anchors"])


def test_every_load_bearing_anchor_is_a_taxonomy_anchor():
    tax = load_taxonomy()
    spelled = {a for body in tax["domains"].values() for a in body["anchors"]}
    assert set(ANCHORS) <= spelled


def test_a_draw_whose_packed_form_would_spell_a_hidden_answer_is_refused():
    # An invented truth that hides the packed form's own file name, which every draw shows.
    spec = GitSafeTreeCensus().build(_sig("git"), random.Random(1))
    spec.truth = {"labels": ["unrelated", "inputs.bundle"], "given": {"shown": "inputs.bundle"}}
    with pytest.raises(ValueError, match="hidden answer"):
        apply_anchor(spec, ANCHORS["git"], random.Random(2))
    spec.truth = {"given": {"shown": "inputs.bundle"}}  # a given value may be shown
    assert apply_anchor(spec, ANCHORS["git"], random.Random(2)).truth == spec.truth


def test_the_leak_rule_restated_here_is_the_validators():
    truth = {"answer": ["remove", "ab", {"deep": "inputs.db"}], "flag": True, "n": 1234567, "given": {"x": "shown!"}}
    assert MIN_SECRET_LEN == quality_validate.MIN_SECRET_LEN
    assert hidden_strings(truth) == set(quality_validate.hidden_truth_strings(truth))
