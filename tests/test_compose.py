"""Fixture and verifier kinds as strategies any family combines with (termforge.generate.compose).

A representative slice runs in real sandboxes: every container kind once and every verifier
strategy at least once, each task sound (the oracle decodes the container and passes, the
untouched environment fails) and each strategy's check failing a plausible but wrong program.
bench/bench_generate.py --signatures prints the coverage this buys on all 15,000 signatures of
configs/tmax15k.yaml; here a slice of them.
"""

from __future__ import annotations

import base64
from collections import Counter
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import make_signature, needs_bwrap
from termforge.axes.vocab import DOMAINS, FIXTURE_KINDS, VERIFIER_KINDS
from termforge.generate.bundles import CONTAINERS
from termforge.generate.compose import plan
from termforge.generate.families import (all_families, default_families, family_by_name,
                                        intrinsic_verifier_kinds_by_domain)
from termforge.generate.honour import ADDED_PROGRAM, actual_axes
from termforge.generate.procedural import build_task, generate_task, shape_mismatches, task_json
from termforge.io import read_json
from termforge.runtime.base import Limits
from termforge.images.runtimes import BwrapRuntime
from termforge.grading.taskcheck import check_soundness
from termforge.grading.verifier import run_oracle, run_verifier

LIMITS = Limits(wall_sec=120, cpu_sec=120, memory_mb=4096)
# (family, fixture kind, verifier kind, complexity): each container once, each strategy at least once.
SLICE = [
    ("regional_revenue_report", "image", "fuzz_equivalence", "moderate"),
    ("log_level_filter", "audio", "metric_threshold", "complex"),
    ("account_audit", "video", "adversarial_corpus", "intricate"),
    ("csv_groupby_tool", "stripped_binary", "multi_protocol", "moderate"),
    ("sqlite_shop_questions", "vendored_package", "fuzz_equivalence", "complex"),
    ("regional_revenue_report", "multi_service_compose", "multi_protocol", "intricate"),
]


def _sig(fam, fixture_kind, verifier_kind, complexity, index=7):
    sig = make_signature(index, fam.domains[0], verifier_kind, fixture_kind)
    return {**sig, "task_complexity": complexity}


def _task(tmp_path, name, fixture_kind, verifier_kind, complexity):
    fam = family_by_name(name)
    return generate_task(_sig(fam, fixture_kind, verifier_kind, complexity), tmp_path / "tasks", families=[fam])


def test_every_domain_can_compose_every_verifier_kind_but_only_its_own_count_as_honoured():
    families = all_families()
    own = intrinsic_verifier_kinds_by_domain(families)
    for domain in DOMAINS:
        for vk in VERIFIER_KINDS:
            for fk in FIXTURE_KINDS:
                if fk == "text_only" and vk != "exact_text":
                    continue  # the decoder strategies need a container; native families cover the rest
                sig = {"id": f"tf-{domain}-{vk}-{fk}", "domain": domain, "verifier_kind": vk, "fixture_kind": fk}
                in_domain = [f for f in families if domain in f.domains]
                # A strategy can still add the kind (for a domain no family of which grades it) ...
                assert any(plan(sig, f).verifier_kind == vk for f in in_domain), (domain, vk, fk)
                # ... but the shape match (what family choice and task.json call honoured) is the
                # family's own final test grading that kind.
                honoured = any("verifier_kind" not in shape_mismatches(sig, f) for f in in_domain)
                assert honoured == (vk in own[domain]), (domain, vk, fk)


def test_what_a_family_declares_it_grades_is_what_its_own_task_reports():
    # The sampler trusts these declarations (intrinsic_verifier_kinds_by_domain): each family's own
    # spec, for every kind it declares, must say it is graded as that kind.
    for fam in all_families():
        for i, vk in enumerate(fam.verifier_kinds):
            sig = make_signature(i, fam.domains[0], vk, fam.fixture_kinds[0])
            assert fam.build(sig, random.Random(i)).verifier_kind == vk, (fam.name, vk)


def test_the_family_choice_prefers_the_family_that_grades_the_kind_itself():
    # debugging: shell_script_fix grades exact text, python_edge_case_fix fuzz equivalence; with a
    # container either could take fuzz_equivalence, but only one grades its own program that way.
    for i in range(40):
        sig = make_signature(i, "debugging", "fuzz_equivalence", "image")
        built = build_task(sig, default_families())
        assert built.family.name == "python_edge_case_fix", i
        assert plan(sig, built.family).strategy is None


def test_a_kind_no_strategy_can_give_stays_the_familys_and_is_recorded():
    fam = family_by_name("regional_revenue_report")
    # A decoder check needs a container; with text-only inputs there is none, so the kind stays exact_text.
    p = plan({"verifier_kind": "fuzz_equivalence", "fixture_kind": "text_only"}, fam)
    assert (p.verifier_kind, p.fixture_kind, p.strategy, p.container) == ("exact_text", "text_only", None, None)
    # A family whose final test inspects the tree has no deliverable files to serve.
    p = plan({"verifier_kind": "multi_protocol", "fixture_kind": "image"}, family_by_name("permission_policy"))
    assert p.verifier_kind == "exact_text" and p.container is CONTAINERS["image"]
    built = build_task(make_signature(3, "data_processing", "fuzz_equivalence", "text_only"), [fam])
    assert built.spec.verifier_kind == "exact_text"


def test_composed_tasks_record_what_they_are(tmp_path):
    task_dir = _task(tmp_path, "log_level_filter", "video", "multi_protocol", "moderate")
    task = read_json(task_dir / "task.json")
    assert task["actual"]["fixture_kind"] == "video" and task["actual"]["verifier_kind"] == "multi_protocol"
    # The container is the family's inputs, honoured; the kind grades only the added program.
    assert task["honoured"]["fixture_kind"] and not task["honoured"]["verifier_kind"]
    assert {"axis": "verifier_kind", "requested": "multi_protocol", "actual": "multi_protocol",
            "graded_by": ADDED_PROGRAM} in task["mismatch"]
    assert "/app/bin/serve-results" in task["output_paths"]
    instruction = (task_dir / "instruction.md").read_text()
    assert "bundle.y4m" in instruction and "serve-results" in instruction
    # Serving the deliverables over HTTP makes it a task with a service in it.
    fam = family_by_name("log_level_filter")
    assert actual_axes({"command_complexity": "bash_code_services"}, fam, "multi_protocol", "video")[
        "command_complexity"] == "bash_code_services"
    assert actual_axes({"command_complexity": "bash_code_services"}, fam, "exact_text", "text_only")[
        "command_complexity"] != "bash_code_services"
    # The inputs are only in the container: the fixtures are the family's, packed at build time.
    assert "TERMFORGE_PACK" in (task_dir / "environment" / "setup.sh").read_text()
    # A second solution meets the same composed task as the oracle: it unpacks the container
    # first and delivers the strategy's program after its own work (bench_compose validates it).
    oracle = (task_dir / "solution" / "solve.sh").read_text()
    second = (task_dir / "solution" / "alternatives" / "python.sh").read_text()
    for part in ("TERMFORGE_UNPACK", "/app/bin/serve-results"):
        assert part in oracle and part in second, part
    assert second.index("TERMFORGE_UNPACK") < second.index("TERMFORGE_FAMILY_SOLVE") < second.index("serve-results")


def test_composition_is_deterministic(tmp_path):
    fam = family_by_name("account_audit")
    a = generate_task(_sig(fam, "stripped_binary", "fuzz_equivalence", "complex"), tmp_path / "a", families=[fam])
    b = generate_task(_sig(fam, "stripped_binary", "fuzz_equivalence", "complex"), tmp_path / "b", families=[fam])
    for rel in ("environment/setup.sh", "tests/test_final_state.py", "solution/solve.sh", "instruction.md"):
        assert (a / rel).read_bytes() == (b / rel).read_bytes(), rel


def test_tmax15k_slice_is_honoured_on_the_shape_axes():
    from test_generate_scale import _signatures

    sigs = _signatures("configs/tmax15k.yaml")[::25]  # 600 of the 15,000, spread over every shard
    families = default_families()
    built = [(s, build_task(s, families)) for s in sigs]
    honoured = sum(not shape_mismatches(s, b.family) for s, b in built)
    assert honoured / len(sigs) >= 0.9, honoured / len(sigs)
    # The sampler asks a domain only for kinds its families grade (rl_v2 in a domain of exact-text
    # families included: it asks exact_text there), and the chosen family's own final test is the
    # kind, with no program added beside it: every task, not a share.
    own = intrinsic_verifier_kinds_by_domain(families)
    for s, b in built:
        assert s["verifier_kind"] in own[s["domain"]], s["id"]
        assert s["verifier_kind"] in b.family.verifier_kinds and plan(s, b.family).strategy is None, s["id"]
    assert sum(s["verifier_kind"] != "exact_text" for s in sigs) > len(sigs) / 3


@needs_bwrap
@pytest.mark.parametrize("name,fixture_kind,verifier_kind,complexity", SLICE, ids=lambda v: str(v))
def test_composed_task_is_sound(name, fixture_kind, verifier_kind, complexity, tmp_path):
    task_dir = _task(tmp_path, name, fixture_kind, verifier_kind, complexity)
    report = check_soundness(task_dir, BwrapRuntime(), tmp_path / "images", LIMITS)
    assert report.ok, f"{report.failed_check}: {report.reason}\n{report.evidence}"


# What the restricted draw mostly builds now: a family graded by its own kind, its inputs in a container.
OWN_KIND_SLICE = [
    ("upload_path_guard", "audio", "adversarial_corpus", "moderate"),
    ("decay_half_life_fit", "image", "metric_threshold", "complex"),
]


@needs_bwrap
@pytest.mark.parametrize("name,fixture_kind,verifier_kind,complexity", OWN_KIND_SLICE, ids=lambda v: str(v))
def test_a_family_graded_by_its_own_kind_in_a_container_is_sound(name, fixture_kind, verifier_kind, complexity,
                                                                 tmp_path):
    task_dir = _task(tmp_path, name, fixture_kind, verifier_kind, complexity)
    task = read_json(task_dir / "task.json")
    assert task["honoured"]["verifier_kind"] and task["honoured"]["fixture_kind"]
    assert task["graded_as"] == [verifier_kind] and not any(p.startswith("/app/bin/") for p in task["output_paths"])
    report = check_soundness(task_dir, BwrapRuntime(), tmp_path / "images", LIMITS)
    assert report.ok, f"{report.failed_check}: {report.reason}\n{report.evidence}"


# Plausible wrong programs, each put in place of the oracle's after it solved the task.
NAIVE = {
    # Extracting with tar follows the archive wherever it points.
    "adversarial_corpus": ("/app/bin/safe-extract", "#!/bin/bash\nmkdir -p \"$2\" && tar -xzf \"$1\" -C \"$2\"\n"),
    # Reading PNG rows as if no filter were used.
    "fuzz_equivalence:image": ("/app/bin/decode-bundle", """#!/usr/bin/env python3
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
pos, idat, width = 8, b"", 0
while pos < len(data):
    n, tag = struct.unpack(">I4s", data[pos:pos + 8])
    if tag == b"IHDR":
        width = struct.unpack(">I", data[pos + 8:pos + 12])[0]
    if tag == b"IDAT":
        idat += data[pos + 8:pos + 8 + n]
    pos += 12 + n
raw = zlib.decompress(idat)
pixels = b"".join(raw[y * (width + 1) + 1:(y + 1) * (width + 1)] for y in range(len(raw) // (width + 1)))
n = struct.unpack(">I", pixels[:4])[0]
open(sys.argv[2], "wb").write(pixels[4:4 + n])
"""),
    # Trusting the vendored reader, which drops the last frame from the complex level on.
    "fuzz_equivalence:vendored_package": ("/app/bin/decode-bundle", """#!/usr/bin/env python3
import sys
from pathlib import Path
sys.path.insert(0, "/app/vendor")
from bundlefmt import read_bundle
open(sys.argv[2], "wb").write(read_bundle(sys.argv[1]))
"""),
    # Serving a stale copy instead of the deliverable.
    "multi_protocol": ("/app/bin/serve-results", """#!/usr/bin/env python3
import sys
from pathlib import Path
if sys.argv[1] == "--print":
    sys.stdout.write("stale\\n")
"""),
}


@needs_bwrap
@pytest.mark.parametrize("name,fixture_kind,verifier_kind,complexity,naive", [
    ("account_audit", "video", "adversarial_corpus", "intricate", "adversarial_corpus"),
    ("regional_revenue_report", "image", "fuzz_equivalence", "moderate", "fuzz_equivalence:image"),
    ("sqlite_shop_questions", "vendored_package", "fuzz_equivalence", "complex", "fuzz_equivalence:vendored_package"),
    ("csv_groupby_tool", "stripped_binary", "multi_protocol", "moderate", "multi_protocol"),
], ids=lambda v: str(v))
def test_a_plausible_wrong_program_scores_zero(name, fixture_kind, verifier_kind, complexity, naive, tmp_path):
    task_dir = _task(tmp_path, name, fixture_kind, verifier_kind, complexity)
    rt = BwrapRuntime()
    image = rt.build(task_dir, tmp_path / "images").image
    path, program = NAIVE[naive]
    with rt.start(image, LIMITS) as session:
        assert run_oracle(session, task_dir).ok
        assert run_verifier(session, task_dir).reward == 1.0
        host = session._host_path(path)
        host.write_text(program)
        verdict = run_verifier(session, task_dir)
    assert verdict.reward == 0.0 and verdict.failed >= 1, verdict.output[-2000:]


def test_every_container_round_trips_through_its_own_decoder(tmp_path):
    # The reference pair the oracle and the tests share, outside any sandbox, on awkward sizes.
    rng = random.Random(5)
    for container in CONTAINERS.values():
        if container.kind == "multi_service_compose":
            continue  # its decoder starts services: covered in the sandbox above
        for size in (0, 1, 255, 1031):
            payload = bytes(rng.randrange(256) for _ in range(size))
            params = container.params(rng, 3)
            params = {**params, **container.fuzz_params(params, rng, True)}
            params.pop("package_dir", None)
            path = tmp_path / f"{container.kind}-{size}"
            program = "\n".join([container.encoder, container.decoder,
                                 "import base64, json, sys",
                                 "job = json.load(sys.stdin)",
                                 "encode(base64.b64decode(job['p']), job['path'], job['params'])",
                                 "sys.stdout.write(base64.b64encode(decode(job['path'])).decode())"])
            job = json.dumps({"p": base64.b64encode(payload).decode(), "path": str(path), "params": params})
            res = subprocess.run([sys.executable, "-c", program], input=job, capture_output=True, text=True)
            assert res.returncode == 0, (container.kind, size, res.stderr[-1000:])
            assert base64.b64decode(res.stdout) == payload, (container.kind, size)


def test_a_metric_family_under_another_strategy_keeps_its_tolerance_in_mutation(tmp_path):
    from termforge.quality.mutation import mutants

    task_dir = _task(tmp_path, "decay_half_life_fit", "audio", "fuzz_equivalence", "short")
    assert read_json(task_dir / "task.json")["graded_as"] == ["fuzz_equivalence", "metric_threshold"]
    got = {m.name.split("@")[0]: m.expect for m in mutants(task_dir, {"/app/fit.json": b'{"half_life": 12.5}\n'})}
    # One step may stay within the family's tolerance: reported only; every number far off must fail.
    assert got["number_plus_1"] is None and got["numbers_scaled"] == 0.0


def _final_test_constants(task_dir) -> dict:
    """The decoder strategies' _TF_BASE and _TF_CASES, read from the final test's source."""
    import ast

    found = {}
    for node in ast.parse((task_dir / "tests" / "test_final_state.py").read_text()).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) \
                and node.targets[0].id in ("_TF_BASE", "_TF_CASES", "_TF_ENCODER"):
            value = node.value.args[0] if isinstance(node.value, ast.Call) else node.value
            found[node.targets[0].id] = ast.literal_eval(value)
    return found


@needs_bwrap
def test_fresh_containers_made_ahead_are_the_bytes_the_images_python_makes(tmp_path):
    # The decoder strategies' fresh containers are made when the task is generated (bundles.encoded)
    # instead of in every grade: each must be the very file the encoder makes inside the sandbox on
    # the task's image, as the test made it before, executable bit included.
    from termforge.generate.verifier_kinds import MADE_AHEAD

    rt = BwrapRuntime()
    kinds = [c.kind for c in CONTAINERS.values() if c.made_ahead]
    assert len(kinds) == 5 and not CONTAINERS["multi_service_compose"].made_ahead
    for n, kind in enumerate(kinds):
        task_dir = _task(tmp_path / kind, "log_level_filter", kind, ("fuzz_equivalence", "metric_threshold")[n % 2],
                         "complex")
        made = json.loads((task_dir / "tests" / MADE_AHEAD).read_text())["containers"]
        consts = _final_test_constants(task_dir)
        base, cases = json.loads(consts["_TF_BASE"]), json.loads(consts["_TF_CASES"])
        assert len(made) == len(cases) >= 6
        image = rt.build(task_dir, tmp_path / "images").image
        program = consts["_TF_ENCODER"] + ("\nimport os\nsys.stdout.write(base64.b64encode(open(job['path'], 'rb')"
                                            ".read()).decode() + ' ' + str(os.access(job['path'], os.X_OK)))\n")
        with rt.start(image, LIMITS) as session:
            for case, ahead in zip(cases, made):
                job = json.dumps({"payload": case["payload"], "path": "/tmp/container",
                                  "params": {**base, **case["params"]}})
                res = session.exec("", argv=["/usr/bin/python3", "-I", "-c", program], stdin=job.encode(), cwd="/tmp")
                assert res.ok, res.tail(1000)
                blob, executable = res.stdout.split()
                assert (ahead["bytes"], ahead["executable"]) == (blob, executable == "True"), kind


@needs_bwrap
def test_a_graded_program_never_finds_the_fresh_containers(tmp_path):
    # The final test reads tests/fresh_containers.json on import and removes it: the decoder it then
    # runs (here one that looks for the file, then fails) finds no copy of the hidden cases.
    from termforge.generate.verifier_kinds import MADE_AHEAD

    task_dir = _task(tmp_path, "log_level_filter", "audio", "metric_threshold", "short")
    assert (task_dir / "tests" / MADE_AHEAD).is_file()
    rt = BwrapRuntime()
    image = rt.build(task_dir, tmp_path / "images").image
    spy = (f"#!/bin/bash\nls -a /tests >> /app/spy.txt\n"
           f"cat /tests/{MADE_AHEAD} > /dev/null 2>&1 && echo READ >> /app/spy.txt\nexit 1\n")
    with rt.start(image, LIMITS) as session:
        assert run_oracle(session, task_dir).ok
        session._host_path("/app/bin/decode-bundle").write_text(spy)
        verdict = run_verifier(session, task_dir)
        seen = session._host_path("/app/spy.txt").read_text()
    assert verdict.reward == 0.0 and verdict.tests_ran
    assert "test.sh" in seen and MADE_AHEAD not in seen and "READ" not in seen, seen[:2000]


@needs_bwrap
def test_without_the_made_ahead_file_the_test_encodes_each_container_itself(tmp_path):
    # A copy of the test without its data file (the .py alone) still grades: each fresh container
    # is encoded when the test runs, as before, and the oracle scores 1.
    from termforge.generate.verifier_kinds import MADE_AHEAD

    task_dir = _task(tmp_path, "log_level_filter", "image", "fuzz_equivalence", "short")
    (task_dir / "tests" / MADE_AHEAD).unlink()
    rt = BwrapRuntime()
    image = rt.build(task_dir, tmp_path / "images").image
    with rt.start(image, LIMITS) as session:
        assert run_oracle(session, task_dir).ok
        verdict = run_verifier(session, task_dir)
    assert verdict.reward == 1.0, verdict.output[-2000:]


def test_the_sample_axes_stage_asks_each_domain_only_for_kinds_its_families_grade(tmp_path):
    from termforge import cli

    root = Path(__file__).resolve().parents[1]
    overlay = tmp_path / "rl.yaml"
    overlay.write_text("corpus: {n_tasks: 400, mix: {legacy: 0, rl_v2: 1}}\n")
    out, stats_path = tmp_path / "signatures.jsonl", tmp_path / "stats.json"
    assert cli.main(["sample-axes", "--configfile", str(root / "config.yaml"), str(overlay), "--out", str(out),
                     "--stats", str(stats_path)]) == 0
    sigs = [json.loads(line) for line in out.read_text().splitlines()]
    own = intrinsic_verifier_kinds_by_domain()
    families = default_families()
    for sig in sigs:
        built = build_task(sig, families)
        # Every kind asked is one the domain's families grade; rl_v2 weighs no kind the domains of
        # exact-text families grade, so there it asks exact_text (stats: outside_corpus_weights).
        assert sig["verifier_kind"] in own[sig["domain"]], sig["id"]
        assert sig["verifier_kind"] != "exact_text" or own[sig["domain"]] == ("exact_text",), sig["id"]
        by_family = sig["verifier_kind"] in built.family.verifier_kinds and plan(sig, built.family).strategy is None
        assert by_family and task_json(sig, built, {})["honoured"]["verifier_kind"], sig["id"]
    honour = json.loads(stats_path.read_text())["verifier_kind_honour"]
    assert honour["restricted"] and sum(honour["asked"].values()) == len(sigs)
    assert sum(honour["honoured_by_family"].values()) == len(sigs)
    assert sum(honour["redirected"].values()) > 0
    outside = Counter(f"rl_v2/{s['domain']}" for s in sigs if own[s["domain"]] == ("exact_text",))
    assert outside and honour["outside_corpus_weights"] == dict(outside)


def test_a_family_that_grades_the_requested_kind_itself_is_always_chosen_first():
    """Invented families of one domain: one grades exact text on the requested (text-only) inputs,
    the other grades the requested kind itself but needs image inputs. Each misses one shape axis,
    so the axis count alone ties them and the task's seed would pick either; a requested kind other
    than exact_text goes first to the family whose own final test is that kind, on every seed."""
    from termforge.generate.base import FamilyAxes, TaskFamily
    from termforge.generate.procedural import rank_families

    class TextReport(TaskFamily):
        axes = FamilyAxes(name="invented_text_report", domains=("data_processing",), verifier_kinds=("exact_text",),
                          fixture_kinds=("text_only",))

    class ImageFuzz(TaskFamily):
        axes = FamilyAxes(name="invented_image_fuzz", domains=("data_processing",),
                          verifier_kinds=("fuzz_equivalence",), fixture_kinds=("image",))

    families = [TextReport(), ImageFuzz()]
    for i in range(60):
        sig = make_signature(i, "data_processing", "fuzz_equivalence", "text_only")
        assert [len(shape_mismatches(sig, f)) for f in families] == [1, 1]  # the tie the axis count leaves
        assert rank_families(sig, families)[0].name == "invented_image_fuzz", sig["id"]
        # exact_text keeps the axis count's order (the legacy corpus keeps its families).
        plain = make_signature(i, "data_processing", "exact_text", "text_only")
        assert rank_families(plain, families)[0].name == "invented_text_report", plain["id"]
