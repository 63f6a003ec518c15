"""The taxonomy (package data and user files) and the axis sampler."""

from __future__ import annotations

import math
import time
from collections import Counter

import pytest
import yaml

from termforge.axes import sampler as S
from termforge.axes.taxonomy import load_taxonomy, package_taxonomy_path
from termforge.axes.vocab import (
    COMMAND_COMPLEXITIES, CORPUS_KINDS, DOMAINS, FIXTURE_KINDS, LEGACY_BUCKETS, TASK_COMPLEXITIES,
    VERIFIER_KINDS,
)
from termforge.errors import ConfigError
from termforge.io import make_task_id, read_jsonl

EVEN_MIX = {"legacy": 1, "sft_v2": 1, "rl_v2": 1}


@pytest.fixture(scope="module")
def tax():
    return load_taxonomy()


@pytest.fixture(scope="module")
def big(tax):
    """3,000 signatures per corpus kind, shared by the distribution tests."""
    return S.sample_signatures(9000, 11, EVEN_MIX, tax)


def by_kind(sigs, kind):
    return [s for s in sigs if s["corpus_kind"] == kind]


def share(rows, pred):
    return sum(1 for r in rows if pred(r)) / len(rows)


def binomial_tol(p, n, z=4.5):
    """A tolerance wide enough that a correct sampler fails with negligible probability."""
    return z * math.sqrt(p * (1 - p) / n)


# --- taxonomy ------------------------------------------------------------------------------------

def test_package_taxonomy_meets_house_counts(tax):
    assert list(tax["domains"]) == list(DOMAINS)
    for dom, body in tax["domains"].items():
        types = body["skill_types"]
        assert 4 <= len(types) <= 7, dom
        assert all(len(skills) >= 5 for skills in types.values()), dom
        all_skills = [s for skills in types.values() for s in skills]
        assert 20 <= len(set(all_skills)) == len(all_skills) <= 40, dom
        assert 5 <= len(body["personas"]) <= 18, dom
        assert all(p.startswith(("a ", "an ")) and " who " in p for p in body["personas"]), dom
        assert len(body["anchors"]) >= 5, dom
    assert tax["languages"]["bash"] > 0 and tax["languages"]["python"] > 0
    assert load_taxonomy(package_taxonomy_path()) == tax  # by path it is the same, and strict


def write_yaml(tmp_path, obj, name="tax.yaml"):
    p = tmp_path / name
    p.write_text(yaml.safe_dump(obj, sort_keys=False))
    return p


def small_user_taxonomy():
    return {"languages": {"bash": 1, "python": 1},
            "domains": {"debugging": {"skill_types": {"tracing": ["strace a process", "read a core dump",
                                                                  "bisect a config file"]},
                                      "personas": ["a student who is learning gdb"]}}}


def test_small_user_taxonomy_is_accepted_and_sampled(tmp_path):
    user = load_taxonomy(write_yaml(tmp_path, small_user_taxonomy()))
    assert list(user["domains"]) == ["debugging"]
    assert user["domains"]["debugging"]["anchors"] == []
    sigs = S.sample_signatures(60, 3, EVEN_MIX, user, anchor_prob=1.0)
    assert {s["domain"] for s in sigs} == {"debugging"}
    assert all(s["anchor"] is None for s in sigs)  # no anchors defined, so none drawn
    assert all(len(s["skills"]) == 3 for s in sigs)  # capped by the 3 skills available
    with pytest.raises(ConfigError, match=r"domains\[0\].*security.*not defined in the taxonomy"):
        S.sample_signatures(5, 3, EVEN_MIX, user, domains=["security"])


def test_unknown_domain_in_user_file_names_file_and_key(tmp_path):
    bad = small_user_taxonomy()
    bad["domains"]["cooking"] = bad["domains"]["debugging"]
    path = write_yaml(tmp_path, bad, "mine.yaml")
    with pytest.raises(ConfigError) as err:
        load_taxonomy(path)
    msg = str(err.value)
    assert str(path) in msg and "domains.cooking" in msg and "unknown domain" in msg


@pytest.mark.parametrize("mutate, key", [
    (lambda t: t.update(extra=1), "extra: unknown key"),
    (lambda t: t["languages"].update(bash=-1), "languages.bash"),
    (lambda t: t["domains"]["debugging"]["skill_types"].update(tracing=["one", "two"]),
     "domains.debugging.skill_types.tracing"),
    (lambda t: t["domains"]["debugging"].update(personas=[]), "domains.debugging.personas"),
    (lambda t: t["domains"]["debugging"].update(anchors=["gdb", "gdb"]), r"domains.debugging.anchors\[1\]"),
    (lambda t: t["domains"]["debugging"].update(hints="x"), "domains.debugging.hints: unknown key"),
])
def test_structural_errors_name_the_key(tmp_path, mutate, key):
    t = small_user_taxonomy()
    mutate(t)
    with pytest.raises(ConfigError, match=key):
        load_taxonomy(write_yaml(tmp_path, t))


def test_duplicate_yaml_key_is_rejected_and_strict_counts_apply_on_request(tmp_path):
    p = tmp_path / "dup.yaml"
    p.write_text("languages: {bash: 1}\ndomains:\n  debugging: {}\n  debugging: {}\n")
    with pytest.raises(ConfigError, match=r"dup.yaml: key domains.debugging is written twice \(line 3 and line 4\)"):
        load_taxonomy(p)
    with pytest.raises(ConfigError, match="must define every domain"):
        load_taxonomy(write_yaml(tmp_path, small_user_taxonomy()), strict=True)


# --- sampler: shape, identity, determinism -------------------------------------------------------

def test_signature_shape_and_ids(tax, big):
    assert [s["index"] for s in big] == list(range(len(big)))
    assert len({s["id"] for s in big}) == len(big)
    for s in big[:500]:
        assert tuple(s) == S.SIGNATURE_KEYS
        assert s["id"] == make_task_id(11, s["index"], {k: v for k, v in s.items() if k not in ("id", "index")})
        body = tax["domains"][s["domain"]]
        assert s["persona"] in body["personas"]
        assert s["anchor"] is None or s["anchor"] in body["anchors"]
        assert s["language"] in tax["languages"]
        assert s["command_complexity"] in COMMAND_COMPLEXITIES


def test_skills_come_from_the_sampled_skill_type(tax, big):
    sizes = Counter()
    for s in big:
        pool = tax["domains"][s["domain"]]["skill_types"][s["skill_type"]]
        assert 3 <= len(s["skills"]) <= 5 and len(set(s["skills"])) == len(s["skills"])
        assert set(s["skills"]) <= set(pool)
        assert s["skills"] == [x for x in pool if x in s["skills"]]  # listed in taxonomy order
        sizes[len(s["skills"])] += 1
    assert set(sizes) == {3, 4, 5}


def test_written_file_is_byte_identical_and_readable(tmp_path, tax):
    a, b = tmp_path / "a" / "sigs.jsonl", tmp_path / "b" / "sigs.jsonl"
    S.write_signatures(a, S.sample_signatures(400, 5, EVEN_MIX, tax))
    S.write_signatures(b, S.sample_signatures(400, 5, EVEN_MIX, tax))
    assert a.read_bytes() == b.read_bytes()
    assert read_jsonl(a) == S.sample_signatures(400, 5, EVEN_MIX, tax)
    assert [p.name for p in a.parent.iterdir()] == ["sigs.jsonl"]  # no temp file left behind
    c = tmp_path / "c.jsonl"
    S.write_signatures(c, S.sample_signatures(400, 6, EVEN_MIX, tax))
    assert c.read_bytes() != a.read_bytes()


def test_signature_i_does_not_depend_on_n(tax):
    # One corpus kind: whole signatures are prefix-stable.
    short = S.sample_signatures(50, 9, {"rl_v2": 1}, tax)
    long = S.sample_signatures(300, 9, {"rl_v2": 1}, tax)
    assert long[:50] == short
    # Mixed kinds: the kind is dealt per n, but nothing else moves, and a signature whose kind
    # happens to agree is identical (id included).
    short = S.sample_signatures(200, 9, EVEN_MIX, tax)
    long = S.sample_signatures(1000, 9, EVEN_MIX, tax)
    kind_free = ("domain", "skill_type", "skills", "persona", "language", "anchor", "command_complexity")
    assert [[s[k] for k in kind_free] for s in short] == [[s[k] for k in kind_free] for s in long[:200]]
    same_kind = [i for i in range(200) if short[i]["corpus_kind"] == long[i]["corpus_kind"]]
    assert len(same_kind) > 30 and all(short[i] == long[i] for i in same_kind)


# --- corpus kinds --------------------------------------------------------------------------------

@pytest.mark.parametrize("n, mix, expected", [
    (9000, EVEN_MIX, {"legacy": 3000, "sft_v2": 3000, "rl_v2": 3000, "calibration": 0}),
    (10, EVEN_MIX, {"legacy": 4, "sft_v2": 3, "rl_v2": 3, "calibration": 0}),
    (7, {"sft_v2": 0.5, "rl_v2": 0.5}, {"legacy": 0, "sft_v2": 4, "rl_v2": 3, "calibration": 0}),
    (15000, {"legacy": 0.2, "sft_v2": 0.5, "rl_v2": 0.3}, {"legacy": 3000, "sft_v2": 7500, "rl_v2": 4500, "calibration": 0}),
    (101, {"legacy": 1, "sft_v2": 2, "rl_v2": 4}, {"legacy": 14, "sft_v2": 29, "rl_v2": 58, "calibration": 0}),
])
def test_corpus_kinds_in_exact_proportions(tax, n, mix, expected):
    assert S.corpus_kind_counts(n, mix) == expected
    if n <= 1000:  # the large cases are checked on real samples by big and the 15,000 run
        sigs = S.sample_signatures(n, 2, mix, tax)
        assert Counter(s["corpus_kind"] for s in sigs) == +Counter(expected)
    kinds = S.assign_corpus_kinds(n, 2, mix)
    assert kinds != sorted(kinds, key=CORPUS_KINDS.index) or len(set(kinds)) == 1  # shuffled


def test_legacy_never_leaves_legacy_buckets(big):
    rows = by_kind(big, "legacy")
    assert len(rows) == 3000
    assert {s["verifier_kind"] for s in rows} == {"exact_text"}
    assert {s["fixture_kind"] for s in rows} == {"text_only"}
    assert {s["task_complexity"] for s in rows} == set(LEGACY_BUCKETS["task_complexity"])


def test_rl_v2_mostly_intricate_and_never_legacy_verifier_or_fixture(big):
    rows = by_kind(big, "rl_v2")
    assert abs(share(rows, lambda s: s["task_complexity"] == "intricate") - 0.75) < binomial_tol(0.75, len(rows))
    assert not any(s["verifier_kind"] == "exact_text" or s["fixture_kind"] == "text_only" for s in rows)
    assert {s["verifier_kind"] for s in rows} == set(VERIFIER_KINDS) - {"exact_text"}
    assert {s["fixture_kind"] for s in rows} == set(FIXTURE_KINDS) - {"text_only"}


def test_sft_v2_gives_new_buckets_weight_m(tax, big):
    rows = by_kind(big, "sft_v2")
    tol = binomial_tol(2 / 3, len(rows))
    assert abs(share(rows, lambda s: s["task_complexity"] == "intricate") - 2 / 3) < tol
    assert abs(share(rows, lambda s: s["verifier_kind"] != "exact_text") - 2 / 3) < tol
    assert abs(share(rows, lambda s: s["fixture_kind"] != "text_only") - 2 / 3) < tol
    assert {s["fixture_kind"] for s in rows} == set(FIXTURE_KINDS)
    # M is configurable: M=5 puts 5/6 on the new buckets.
    m5 = S.sample_signatures(3000, 11, {"sft_v2": 1}, tax, new_bucket_weight=5)
    assert abs(share(m5, lambda s: s["task_complexity"] == "intricate") - 5 / 6) < binomial_tol(5 / 6, 3000)


def test_corpus_axis_weights_are_probabilities():
    for kind in CORPUS_KINDS:
        for axis, probs in S.corpus_axis_weights(kind).items():
            assert math.isclose(sum(probs.values()), 1.0)
    w = S.corpus_axis_weights("sft_v2")
    assert math.isclose(w["task_complexity"]["intricate"], 2 / 3)
    assert math.isclose(w["verifier_kind"]["metric_threshold"], (2 / 3) / 4)
    assert math.isclose(S.corpus_axis_weights("rl_v2")["task_complexity"]["short"], 1 / 12)


def test_domains_uniform_and_restrictable(tax, big):
    counts = Counter(s["domain"] for s in big)
    assert set(counts) == set(DOMAINS)
    expected = len(big) / len(DOMAINS)
    assert all(abs(c - expected) < 4.5 * math.sqrt(expected) for c in counts.values())
    two = S.sample_signatures(300, 4, EVEN_MIX, tax, domains=["security", "debugging"])
    assert {s["domain"] for s in two} == {"security", "debugging"}


def test_anchor_rate(tax, big):
    assert abs(share(big, lambda s: s["anchor"] is not None) - 0.35) < binomial_tol(0.35, len(big))
    assert all(s["anchor"] is None for s in S.sample_signatures(200, 1, EVEN_MIX, tax, anchor_prob=0.0))
    assert all(s["anchor"] for s in S.sample_signatures(200, 1, EVEN_MIX, tax, anchor_prob=1.0))


@pytest.mark.parametrize("kwargs, key", [
    ({"corpus_mix": {"legacy": 1, "sft_v3": 1}}, "corpus_mix.sft_v3"),
    ({"corpus_mix": {"legacy": -1}}, "corpus_mix.legacy"),
    ({"corpus_mix": {"legacy": 0}}, "corpus_mix"),
    ({"domains": ["security", "cooking"]}, r"domains\[1\]"),
    ({"domains": []}, "domains"),
    ({"anchor_prob": 1.5}, "anchor_prob"),
    ({"n": -1}, "n:"),
    ({"new_bucket_weight": 0}, "new_bucket_weight"),
])
def test_bad_arguments_are_config_errors_naming_the_key(tax, kwargs, key):
    args = {"n": 10, "seed": 1, "corpus_mix": EVEN_MIX, "taxonomy": tax} | kwargs
    with pytest.raises(ConfigError, match=key):
        S.sample_signatures(**args)


# --- balance -------------------------------------------------------------------------------------

def test_axis_balance(tmp_path, tax, big):
    stats = S.axis_balance(big, tax)
    axes = stats["axes"]
    assert set(axes) == {"domain", "skill_type", "persona", "language", "anchor_presence", "task_complexity",
                         "command_complexity", "verifier_kind", "fixture_kind", "corpus_kind"}
    for name, a in axes.items():
        assert 0 < a["normalised_effective_number"] <= 1, name
    assert axes["domain"]["possible"] == 9 and sum(axes["domain"]["counts"].values()) == len(big)
    assert axes["corpus_kind"]["normalised_effective_number"] == 1.0  # exact thirds
    assert axes["domain"]["normalised_effective_number"] > 0.99
    assert axes["command_complexity"]["normalised_effective_number"] > 0.99
    assert axes["skill_type"]["normalised_effective_number"] > 0.98
    assert set(axes["persona"]["by_domain"]) == set(DOMAINS)
    assert axes["task_complexity"]["possible"] == len(TASK_COMPLEXITIES)
    t = stats["totals"]
    assert t["n"] == len(big) and t["by_corpus_kind"]["legacy"]["intricate"] == 0.0
    assert t["by_corpus_kind"]["rl_v2"]["non_legacy_fixture"] == 1.0
    assert t["least_balanced_axis"] in axes
    # A legacy-only run can only produce one verifier kind, so it is perfectly balanced there.
    legacy = S.sample_signatures(300, 1, {"legacy": 1}, tax)
    lstats = S.axis_balance(legacy, tax)["axes"]
    assert lstats["verifier_kind"]["possible"] == 1 and lstats["verifier_kind"]["normalised_effective_number"] == 1
    assert lstats["task_complexity"]["possible"] == 3
    # Stats files are deterministic too.
    S.write_stats(tmp_path / "s1.json", stats)
    S.write_stats(tmp_path / "s2.json", S.axis_balance(big, tax))
    assert (tmp_path / "s1.json").read_bytes() == (tmp_path / "s2.json").read_bytes()


def test_normalised_effective_number_extremes():
    assert S.normalised_effective_number({"a": 5, "b": 5}, 2) == 1.0
    assert S.normalised_effective_number({"a": 10}, 4) == 0.25
    assert S.normalised_effective_number({}, 4) is None


def test_sampling_15000_is_fast(tax, capsys):
    t0 = time.perf_counter()
    sigs = S.sample_signatures(15000, 42, {"legacy": 0.2, "sft_v2": 0.5, "rl_v2": 0.3}, tax)
    elapsed = time.perf_counter() - t0
    assert len(sigs) == 15000 and len({s["id"] for s in sigs}) == 15000
    assert Counter(s["corpus_kind"] for s in sigs) == {"legacy": 3000, "sft_v2": 7500, "rl_v2": 4500}
    with capsys.disabled():
        print(f"\n[axes] sampled 15,000 signatures in {elapsed:.2f} s")


# --- verifier kinds a domain can honour (generate.families.intrinsic_verifier_kinds_by_domain) ---

# Invented restrictions, not the families': one domain with a single new kind, one with two, one
# with only the legacy kind (rl_v2 can ask it nothing), one not listed at all.
HONOURS = {"security": ("adversarial_corpus",), "debugging": ("exact_text", "fuzz_equivalence", "multi_protocol"),
           "file_operations": ("exact_text",)}


def test_a_domain_is_asked_only_for_kinds_it_honours(tax):
    draw = S.draw_signatures(3000, 21, EVEN_MIX, tax, verifier_kinds_by_domain=HONOURS)
    for sig, requested in zip(draw.signatures, draw.requested_verifier_kinds):
        allowed = [k for k in HONOURS.get(sig["domain"], ())
                   if S.corpus_axis_weights(sig["corpus_kind"])["verifier_kind"][k] > 0]
        if allowed:
            assert sig["verifier_kind"] in allowed, sig
            # a request the domain honours is never moved
            assert requested not in allowed or sig["verifier_kind"] == requested, sig
        elif HONOURS.get(sig["domain"]):
            # Nothing it honours has weight for this corpus kind (rl_v2 in file_operations): it is
            # still asked only for a kind it honours, never one a program beside the task supplies.
            assert sig["verifier_kind"] in HONOURS[sig["domain"]], sig
            assert (sig["corpus_kind"], sig["domain"]) in draw.outside_corpus_weights, sig
        else:  # a domain no family serves at all: the weighted draw stands
            assert sig["verifier_kind"] == requested, sig
    rl_sec = [s for s in draw.signatures if s["corpus_kind"] == "rl_v2" and s["domain"] == "security"]
    assert rl_sec and {s["verifier_kind"] for s in rl_sec} == {"adversarial_corpus"}
    # debugging under sft_v2 keeps both its new kinds at their relative weights (one draw, renormalised)
    sft_dbg = Counter(s["verifier_kind"] for s in draw.signatures
                      if s["corpus_kind"] == "sft_v2" and s["domain"] == "debugging")
    assert set(sft_dbg) == {"exact_text", "fuzz_equivalence", "multi_protocol"}


def test_the_restriction_moves_only_the_verifier_kind(tax):
    free = S.sample_signatures(2000, 8, EVEN_MIX, tax)
    limited = S.sample_signatures(2000, 8, EVEN_MIX, tax, verifier_kinds_by_domain=HONOURS)
    everything = S.sample_signatures(2000, 8, EVEN_MIX, tax,
                                     verifier_kinds_by_domain={d: VERIFIER_KINDS for d in DOMAINS})
    assert everything == free  # allowing every kind is the unrestricted draw, byte for byte
    assert limited == S.sample_signatures(2000, 8, EVEN_MIX, tax, verifier_kinds_by_domain=dict(HONOURS))
    moved = 0
    for a, b in zip(free, limited):
        strip = lambda s: {k: v for k, v in s.items() if k not in ("id", "verifier_kind")}  # noqa: E731
        assert strip(a) == strip(b)
        moved += a["verifier_kind"] != b["verifier_kind"]
    assert moved > 100


def test_the_stats_say_what_was_requested_asked_and_honoured(tax):
    draw = S.draw_signatures(1500, 3, {"rl_v2": 1}, tax, verifier_kinds_by_domain=HONOURS)
    free = S.sample_signatures(1500, 3, {"rl_v2": 1}, tax)
    got = S.verifier_kind_honour(draw)
    assert got["requested"] == dict(Counter(s["verifier_kind"] for s in free))
    assert got["asked"] == dict(Counter(s["verifier_kind"] for s in draw.signatures))
    honoured = [s for s in draw.signatures if s["verifier_kind"] in HONOURS.get(s["domain"], ())]
    assert sum(got["honoured_by_family"].values()) == len(honoured)
    # Every signature of a listed domain asks a kind it honours; rl_v2 weighs no kind file_operations
    # honours, so there it asks exact_text, outside its weights, and the stats count each one.
    assert {s["domain"] for s in draw.signatures} - {s["domain"] for s in honoured} == set(DOMAINS) - set(HONOURS)
    ops = [s for s in draw.signatures if s["domain"] == "file_operations"]
    assert ops and {s["verifier_kind"] for s in ops} == {"exact_text"}
    assert got["outside_corpus_weights"] == {"rl_v2/file_operations": len(ops)}
    assert got["honoured_share"] == round(len(honoured) / 1500, 6)
    assert sum(got["redirected"].values()) == sum(a["verifier_kind"] != b["verifier_kind"]
                                                  for a, b in zip(free, draw.signatures))
