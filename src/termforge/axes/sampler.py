"""Sampling task signatures from the taxonomy, and measuring how balanced a sample is.

A signature fixes every axis of one task . Two rules shape this module:

* Signature i depends only on (seed, i, its corpus kind, the taxonomy): every draw comes from one
  RNG seeded from (seed, i), and each draw consumes the same amount of that RNG whatever the
  corpus kind, so growing a corpus from n to 2n keeps the first n signatures' domains, skills,
  personas, languages and anchors. The corpus kind itself is the one thing that depends on n,
  because kinds are dealt out in exact proportions (largest remainder) and then shuffled.
* Corpus kinds reweight three axes (task complexity, verifier kind, fixture kind) against the
  "legacy" buckets of vocab.LEGACY_BUCKETS:
    legacy  only legacy buckets (so only exact_text, only text_only, never intricate)
    sft_v2  the new buckets share total weight M (default 2) against the legacy buckets' 1
    rl_v2   intricate with probability 3/4; never a legacy verifier or fixture bucket
    calibration  the legacy verifier and fixture buckets, every complexity alike (its tasks come
            from the opt-in calibration family, whose difficulty knob is the complexity)
* A domain is only asked for verifier kinds some family there grades on its own deliverable
  (`verifier_kinds_by_domain`, from generate.families.intrinsic_verifier_kinds_by_domain): the
  kind is drawn with the corpus kind's weights; a kind the domain honours stands, and one it
  cannot is replaced by a draw over the kinds it can (weights renormalised) from where the same
  uniform number fell inside the replaced kind's bucket, so RNG consumption stays fixed. Where
  the domain can honour none of the corpus kind's kinds (rl_v2 in a domain whose families all
  grade exact text) the domain is still never asked for a kind no family there grades: the same
  number picks, uniformly, among the kinds the domain does honour, outside the corpus kind's
  weights (so such an rl_v2 signature asks exact_text); the stats (verifier_kind_honour,
  `outside_corpus_weights`) count these per corpus kind and domain. Together with the family
  choice (generate.procedural.rank_families: a family whose own final test is the requested kind
  comes first), every kind a restricted draw asks is graded by the family's own deliverable.
* A domain is only asked for anchors a task there can bear (`anchors_by_domain`, from
  generate.anchors.load_bearing_anchors_by_domain: the anchor decides how the inputs arrive), and
  a corpus kind in `anchorless_kinds` (one whose families cannot take an anchor) for none. The
  anchor coin and the taxonomy-wide draw are made as before (RNG consumption stays fixed); an
  anchor the domain cannot bear is replaced by a uniform pick over those it can, from an RNG of
  its own, and dropped where it can bear none. The stats (anchor_honour) say which were dropped.
"""

from __future__ import annotations

import bisect
import math
import random
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Iterable, Mapping

from termforge.axes.vocab import (
    COMMAND_COMPLEXITIES, CORPUS_KINDS, DOMAINS, FIXTURE_KINDS, LEGACY_BUCKETS, TASK_COMPLEXITIES,
    VERIFIER_KINDS,
)
from termforge.errors import ConfigError
from termforge.io import atomic_write_json, atomic_write_jsonl, make_task_id, seed_from

REWEIGHTED_AXES = {
    "task_complexity": TASK_COMPLEXITIES,
    "verifier_kind": VERIFIER_KINDS,
    "fixture_kind": FIXTURE_KINDS,
}
SKILLS_PER_TASK = (3, 5)
DEFAULT_NEW_BUCKET_WEIGHT = 2.0
DEFAULT_RL_INTRICATE_PROB = 0.75

SIGNATURE_KEYS = ("id", "index", "corpus_kind", "domain", "skill_type", "skills", "persona", "language",
                  "anchor", "task_complexity", "command_complexity", "verifier_kind", "fixture_kind")


def corpus_axis_weights(corpus_kind: str, new_bucket_weight: float = DEFAULT_NEW_BUCKET_WEIGHT,
                        rl_intricate_prob: float = DEFAULT_RL_INTRICATE_PROB) -> dict[str, dict[str, float]]:
    """Probabilities over each reweighted axis for one corpus kind (each axis sums to 1)."""
    if corpus_kind not in CORPUS_KINDS:
        raise ConfigError(f"corpus_kind: unknown corpus kind {corpus_kind!r}; expected one of {list(CORPUS_KINDS)}")
    out: dict[str, dict[str, float]] = {}
    for axis, values in REWEIGHTED_AXES.items():
        legacy = [v for v in values if v in LEGACY_BUCKETS[axis]]
        new = [v for v in values if v not in LEGACY_BUCKETS[axis]]
        if corpus_kind == "calibration" and axis == "task_complexity":
            out[axis] = {v: 1.0 / len(values) for v in values}
            continue
        if corpus_kind in ("legacy", "calibration"):
            legacy_total, new_total = 1.0, 0.0
        elif corpus_kind == "sft_v2":
            legacy_total, new_total = 1.0, float(new_bucket_weight)
        elif axis == "task_complexity":
            # rl_v2: the one new complexity bucket is intricate, at its own fixed probability.
            legacy_total, new_total = 1.0 - rl_intricate_prob, rl_intricate_prob
        else:
            legacy_total, new_total = 0.0, 1.0
        total = legacy_total + new_total
        probs = {v: (legacy_total / len(legacy) if v in legacy else new_total / len(new)) / total for v in values}
        out[axis] = probs
    return out


def _cumulative(probs: Iterable[float]) -> list[float]:
    cum, acc = [], 0.0
    for p in probs:
        acc += p
        cum.append(acc)
    return cum


def _pick(rng: random.Random, values: tuple | list, cum: list[float]):
    """One weighted choice using exactly one rng.random() call, so RNG consumption (and therefore
    every later draw) is the same whatever the weights are."""
    return _pick_at(rng.random(), values, cum)


def _pick_at(u: float, values: tuple | list, cum: list[float]):
    """The weighted choice for the uniform number u. bisect_right returns the first entry whose
    cumulative weight exceeds the draw, which a zero-weight entry never is."""
    return values[bisect.bisect_right(cum, u * cum[-1])]


def _has_weight(cum: list[float], i: int) -> bool:
    return cum[i] > (cum[i - 1] if i else 0.0)


def _within_bucket(u: float, cum: list[float]) -> float:
    """Where u fell inside the bucket it picked, rescaled to [0, 1): uniform and independent of
    which bucket it was, so a redirected draw needs no second random number."""
    x = u * cum[-1]
    i = bisect.bisect_right(cum, x)
    lo = cum[i - 1] if i else 0.0
    # Rounding can give exactly 1.0, which would pick past the last kind of the next table.
    return min((x - lo) / (cum[i] - lo), 0.999999999)


def _check_mix(corpus_mix: dict) -> dict[str, Fraction]:
    if not isinstance(corpus_mix, dict) or not corpus_mix:
        raise ConfigError(f"corpus_mix: expected a non-empty mapping of corpus kind to weight, got {corpus_mix!r}")
    mix: dict[str, Fraction] = {}
    for kind, w in corpus_mix.items():
        if kind not in CORPUS_KINDS:
            raise ConfigError(f"corpus_mix.{kind}: unknown corpus kind; expected one of {list(CORPUS_KINDS)}")
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w) or w < 0:
            raise ConfigError(f"corpus_mix.{kind}: weight must be a finite number >= 0, got {w!r}")
        mix[kind] = Fraction(w)
    if sum(mix.values()) <= 0:
        raise ConfigError("corpus_mix: at least one corpus kind needs a positive weight")
    return mix


def corpus_kind_counts(n: int, corpus_mix: dict) -> dict[str, int]:
    """Exact per-kind counts for n tasks by the largest-remainder method (ties go to the kind that
    comes first in vocab.CORPUS_KINDS), so the counts always sum to n."""
    mix = _check_mix(corpus_mix)
    total = sum(mix.values())
    quotas = {k: n * mix.get(k, Fraction(0)) / total for k in CORPUS_KINDS}
    counts = {k: math.floor(q) for k, q in quotas.items()}
    left = n - sum(counts.values())
    by_remainder = sorted(CORPUS_KINDS, key=lambda k: (-(quotas[k] - counts[k]), CORPUS_KINDS.index(k)))
    for k in by_remainder[:left]:
        counts[k] += 1
    return counts


def assign_corpus_kinds(n: int, seed: int, corpus_mix: dict) -> list[str]:
    counts = corpus_kind_counts(n, corpus_mix)
    kinds = [k for k in CORPUS_KINDS for _ in range(counts[k])]
    random.Random(seed_from("corpus_kinds", seed, n)).shuffle(kinds)
    return kinds


def _resolve_domains(taxonomy: dict, domains: list[str] | None) -> list[str]:
    if domains is None:
        # The taxonomy's own domains (all nine for the package file), in vocabulary order.
        return [d for d in DOMAINS if d in taxonomy["domains"]]
    if isinstance(domains, str) or not isinstance(domains, (list, tuple)) or not domains:
        raise ConfigError(f"domains: expected a non-empty list of domain names, got {domains!r}")
    seen: list[str] = []
    for i, d in enumerate(domains):
        if d not in DOMAINS:
            raise ConfigError(f"domains[{i}]: unknown domain {d!r}; expected one of {list(DOMAINS)}")
        if d not in taxonomy["domains"]:
            raise ConfigError(f"domains[{i}]: domain {d!r} is not defined in the taxonomy "
                              f"(it defines {list(taxonomy['domains'])})")
        if d in seen:
            raise ConfigError(f"domains[{i}]: domain {d!r} is listed twice")
        seen.append(d)
    return seen


class _Tables:
    """Everything per-signature sampling needs, precomputed once per call."""

    def __init__(self, taxonomy: dict, domains: list[str], new_bucket_weight: float, rl_intricate_prob: float,
                 verifier_kinds_by_domain: Mapping[str, Iterable[str]] | None = None,
                 anchors_by_domain: Mapping[str, Iterable[str]] | None = None, anchorless_kinds: Iterable[str] = ()):
        self.domains = domains
        # Domain index -> the anchors a task there can bear, in taxonomy order; None: unrestricted.
        self.bearable_anchors = None if anchors_by_domain is None else [
            [a for a in taxonomy["domains"][d]["anchors"] if a in set(anchors_by_domain.get(d, ()))] for d in domains]
        self.anchorless_kinds = frozenset(anchorless_kinds)
        self.domain_bodies = [taxonomy["domains"][d] for d in domains]
        self.skill_types = [list(b["skill_types"].items()) for b in self.domain_bodies]
        langs = taxonomy["languages"]
        self.languages = list(langs)
        self.language_cum = _cumulative(langs.values())
        self.kind_tables = {}
        for kind in CORPUS_KINDS:
            weights = corpus_axis_weights(kind, new_bucket_weight, rl_intricate_prob)
            self.kind_tables[kind] = {axis: _cumulative(weights[axis][v] for v in REWEIGHTED_AXES[axis])
                                      for axis in REWEIGHTED_AXES}
        # (corpus kind, domain) -> cumulative weights over the kinds the domain honours; absent
        # where no restriction is given or the domain honours no kind at all. Where it honours
        # none the corpus kind weighs, the kinds it honours count alike (module docstring), and
        # the pair is in `outside_corpus_weights`.
        self.honoured_verifier_cum: dict[tuple[str, str], list[float]] = {}
        self.outside_corpus_weights: set[tuple[str, str]] = set()
        for domain in domains if verifier_kinds_by_domain is not None else ():
            allowed = set(verifier_kinds_by_domain.get(domain, ()))
            for kind in CORPUS_KINDS:
                w = corpus_axis_weights(kind, new_bucket_weight, rl_intricate_prob)["verifier_kind"]
                cum = _cumulative(w[v] if v in allowed else 0.0 for v in VERIFIER_KINDS)
                if cum[-1] <= 0 and allowed:
                    cum = _cumulative(1.0 if v in allowed else 0.0 for v in VERIFIER_KINDS)
                    self.outside_corpus_weights.add((kind, domain))
                if cum[-1] > 0:
                    self.honoured_verifier_cum[(kind, domain)] = cum


def _sample_one(seed: int, index: int, corpus_kind: str, t: _Tables, anchor_prob: float
                ) -> tuple[dict, str, str | None]:
    """The signature, and the verifier kind and anchor drawn before the domain's restrictions
    (the requests the stats compare with what the signature asks)."""
    # Fixed draw order and fixed RNG consumption per draw (see the module docstring).
    rng = random.Random(seed_from("signature", seed, index))
    d = rng.randrange(len(t.domains))
    body = t.domain_bodies[d]
    skill_type, skill_pool = t.skill_types[d][rng.randrange(len(t.skill_types[d]))]
    k = min(rng.randint(*SKILLS_PER_TASK), len(skill_pool))
    # Listed in taxonomy order so the same set of skills always reads the same way.
    skills = [skill_pool[i] for i in sorted(rng.sample(range(len(skill_pool)), k))]
    persona = body["personas"][rng.randrange(len(body["personas"]))]
    language = _pick(rng, t.languages, t.language_cum)
    anchored = rng.random() < anchor_prob
    anchors = body["anchors"]
    anchor_i = rng.randrange(len(anchors)) if anchors else None
    anchor = requested_anchor = anchors[anchor_i] if anchored and anchors else None
    if anchor is not None and t.bearable_anchors is not None:
        bearable = [] if corpus_kind in t.anchorless_kinds else t.bearable_anchors[d]
        if not bearable:
            anchor = None
        elif anchor not in bearable:
            anchor = bearable[random.Random(seed_from("anchor", seed, index)).randrange(len(bearable))]
    kind_t = t.kind_tables[corpus_kind]
    task_complexity = _pick(rng, TASK_COMPLEXITIES, kind_t["task_complexity"])
    command_complexity = COMMAND_COMPLEXITIES[rng.randrange(len(COMMAND_COMPLEXITIES))]
    u = rng.random()
    requested = _pick_at(u, VERIFIER_KINDS, kind_t["verifier_kind"])
    verifier_kind = requested
    honourable = t.honoured_verifier_cum.get((corpus_kind, t.domains[d]))
    if honourable and not _has_weight(honourable, VERIFIER_KINDS.index(requested)):
        verifier_kind = _pick_at(_within_bucket(u, kind_t["verifier_kind"]), VERIFIER_KINDS, honourable)
    sig = {
        "corpus_kind": corpus_kind,
        "domain": t.domains[d],
        "skill_type": skill_type,
        "skills": skills,
        "persona": persona,
        "language": language,
        "anchor": anchor,
        "task_complexity": task_complexity,
        "command_complexity": command_complexity,
        "verifier_kind": verifier_kind,
        "fixture_kind": _pick(rng, FIXTURE_KINDS, kind_t["fixture_kind"]),
    }
    return {"id": make_task_id(seed, index, sig), "index": index, **sig}, requested, requested_anchor


@dataclass(frozen=True)
class Draw:
    signatures: list[dict]
    requested_verifier_kinds: list[str]
    """Per signature, the verifier kind the corpus kind's weights drew (before the domain's restriction)."""
    verifier_kinds_by_domain: dict[str, tuple[str, ...]] | None
    requested_anchors: list[str | None] | None = None
    """Per signature, the anchor drawn before the domain's restriction (None: no anchor drawn)."""
    anchors_by_domain: dict[str, tuple[str, ...]] | None = None
    outside_corpus_weights: frozenset = frozenset()
    """(corpus kind, domain) pairs asked, for want of any other, a kind their corpus kind does not weigh."""


def sample_signatures(n: int, seed: int, corpus_mix: dict[str, float], taxonomy: dict,
                      domains: list[str] | None = None, anchor_prob: float = 0.35, *,
                      new_bucket_weight: float = DEFAULT_NEW_BUCKET_WEIGHT,
                      rl_intricate_prob: float = DEFAULT_RL_INTRICATE_PROB,
                      verifier_kinds_by_domain: Mapping[str, Iterable[str]] | None = None,
                      anchors_by_domain: Mapping[str, Iterable[str]] | None = None,
                      anchorless_kinds: Iterable[str] = ()) -> list[dict]:
    """n signatures for corpus seed `seed`. Corpus kinds follow corpus_mix in exact proportions;
    domains are uniform over `domains` (default: every domain the taxonomy defines);
    `verifier_kinds_by_domain` limits each domain's verifier kinds and `anchors_by_domain` its
    anchors (module docstring)."""
    return draw_signatures(n, seed, corpus_mix, taxonomy, domains, anchor_prob, new_bucket_weight=new_bucket_weight,
                           rl_intricate_prob=rl_intricate_prob, verifier_kinds_by_domain=verifier_kinds_by_domain,
                           anchors_by_domain=anchors_by_domain, anchorless_kinds=anchorless_kinds).signatures


def draw_signatures(n: int, seed: int, corpus_mix: dict[str, float], taxonomy: dict,
                    domains: list[str] | None = None, anchor_prob: float = 0.35, *,
                    new_bucket_weight: float = DEFAULT_NEW_BUCKET_WEIGHT,
                    rl_intricate_prob: float = DEFAULT_RL_INTRICATE_PROB,
                    verifier_kinds_by_domain: Mapping[str, Iterable[str]] | None = None,
                    anchors_by_domain: Mapping[str, Iterable[str]] | None = None,
                    anchorless_kinds: Iterable[str] = ()) -> Draw:
    """sample_signatures, with what each signature's verifier kind and anchor were before the restrictions."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ConfigError(f"n: expected a whole number >= 0, got {n!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ConfigError(f"seed: expected an integer, got {seed!r}")
    if isinstance(anchor_prob, bool) or not isinstance(anchor_prob, (int, float)) or not 0 <= anchor_prob <= 1:
        raise ConfigError(f"anchor_prob: expected a probability in [0, 1], got {anchor_prob!r}")
    if isinstance(new_bucket_weight, bool) or not isinstance(new_bucket_weight, (int, float)) \
            or not math.isfinite(new_bucket_weight) or new_bucket_weight <= 0:
        raise ConfigError(f"new_bucket_weight: expected a finite number > 0, got {new_bucket_weight!r}")
    if isinstance(rl_intricate_prob, bool) or not isinstance(rl_intricate_prob, (int, float)) \
            or not 0 < rl_intricate_prob <= 1:
        raise ConfigError(f"rl_intricate_prob: expected a probability in (0, 1], got {rl_intricate_prob!r}")
    chosen = _resolve_domains(taxonomy, domains)
    kinds = assign_corpus_kinds(n, seed, corpus_mix)
    by_domain = None
    if verifier_kinds_by_domain is not None:
        by_domain = {d: tuple(v for v in VERIFIER_KINDS if v in set(verifier_kinds_by_domain.get(d, ())))
                     for d in chosen}
    tables = _Tables(taxonomy, chosen, new_bucket_weight, rl_intricate_prob, by_domain, anchors_by_domain,
                     anchorless_kinds)
    drawn = [_sample_one(seed, i, kinds[i], tables, anchor_prob) for i in range(n)]
    anchor_table = None if tables.bearable_anchors is None else {
        d: tuple(a) for d, a in zip(chosen, tables.bearable_anchors)}
    return Draw([sig for sig, _, _ in drawn], [req for _, req, _ in drawn], by_domain,
                [a for _, _, a in drawn], anchor_table, frozenset(tables.outside_corpus_weights))


def write_signatures(path: str | Path, sigs: list[dict]) -> None:
    """One canonical-JSON signature per line, written atomically (same signatures, same bytes)."""
    atomic_write_jsonl(path, sigs)


# --- balance -------------------------------------------------------------------------------------

def normalised_effective_number(counts: dict, n_possible: int) -> float | None:
    """exp(Shannon entropy) / number of possible values: 1 when perfectly even, 1/N when one value
    takes everything. None when there is nothing to measure."""
    total = sum(counts.values())
    if total == 0 or n_possible <= 0:
        return None
    h = -sum((c / total) * math.log(c / total) for c in counts.values() if c > 0)
    return round(math.exp(h) / n_possible, 6)


def _possible_reweighted(axis: str, kinds_present: Iterable[str]) -> list[str]:
    values = set()
    for kind in kinds_present:
        probs = corpus_axis_weights(kind)[axis]
        values.update(v for v, p in probs.items() if p > 0)
    return [v for v in REWEIGHTED_AXES[axis] if v in values]


def _per_domain_axis(sigs: list[dict], axis: str, options: dict[str, list[str]]) -> dict:
    """An axis whose possible values depend on the domain: each domain is measured against its
    own options, and the headline number is the count-weighted mean over domains."""
    per_domain = {}
    weighted, total = 0.0, 0
    for dom, opts in options.items():
        counts = Counter(s[axis] for s in sigs if s["domain"] == dom)
        n_dom = sum(counts.values())
        value = normalised_effective_number(counts, len(opts))
        per_domain[dom] = {"n": n_dom, "possible": len(opts), "observed": len(counts),
                           "normalised_effective_number": value,
                           "counts": {v: counts[v] for v in opts if counts[v]}}
        if value is not None:
            weighted += value * n_dom
            total += n_dom
    return {"normalised_effective_number": round(weighted / total, 6) if total else None,
            "by_domain": per_domain}


def axis_balance(sigs: list[dict], taxonomy: dict, domains: list[str] | None = None,
                 draw: Draw | None = None) -> dict:
    """Per-axis counts and normalised effective numbers (exp(H)/N, N = values possible in this
    run), plus totals. The possible values of the three reweighted axes are those the corpus
    kinds present can produce (a legacy-only run is perfectly balanced on verifier kind), and, given
    the `draw` the signatures come from, the verifier kinds it asked outside the corpus weights
    (Draw.outside_corpus_weights)."""
    chosen = _resolve_domains(taxonomy, domains)
    kinds_present = [k for k in CORPUS_KINDS if any(s["corpus_kind"] == k for s in sigs)]
    outside = set() if draw is None else {s["verifier_kind"] for s in draw.signatures
                                          if (s["corpus_kind"], s["domain"]) in draw.outside_corpus_weights}
    possible_kinds = _possible_reweighted("verifier_kind", kinds_present)
    possible_kinds = [v for v in VERIFIER_KINDS if v in set(possible_kinds) | outside]
    flat_options: dict[str, list] = {
        "domain": chosen,
        "language": [lang for lang, w in taxonomy["languages"].items() if w > 0],
        "anchor_presence": ["anchored", "none"],
        "task_complexity": _possible_reweighted("task_complexity", kinds_present),
        "command_complexity": list(COMMAND_COMPLEXITIES),
        "verifier_kind": possible_kinds,
        "fixture_kind": _possible_reweighted("fixture_kind", kinds_present),
        "corpus_kind": kinds_present,
    }
    axes: dict[str, dict] = {}
    for axis, options in flat_options.items():
        if axis == "anchor_presence":
            counts = Counter("anchored" if s["anchor"] else "none" for s in sigs)
        else:
            counts = Counter(s[axis] for s in sigs)
        extra = sorted(set(counts) - set(options), key=str)
        if extra:
            raise ConfigError(f"signatures: axis {axis} has values {extra} outside this run's options {options}")
        axes[axis] = {"possible": len(options), "observed": len(counts),
                      "normalised_effective_number": normalised_effective_number(counts, len(options)),
                      "counts": {v: counts[v] for v in options if counts[v]}}
    doms = taxonomy["domains"]
    axes["skill_type"] = _per_domain_axis(sigs, "skill_type", {d: list(doms[d]["skill_types"]) for d in chosen})
    axes["persona"] = _per_domain_axis(sigs, "persona", {d: doms[d]["personas"] for d in chosen})

    by_kind = {}
    for kind in kinds_present:
        rows = [s for s in sigs if s["corpus_kind"] == kind]
        by_kind[kind] = {
            "n": len(rows),
            "intricate": round(sum(s["task_complexity"] == "intricate" for s in rows) / len(rows), 6),
            "non_legacy_verifier": round(sum(s["verifier_kind"] not in LEGACY_BUCKETS["verifier_kind"]
                                             for s in rows) / len(rows), 6),
            "non_legacy_fixture": round(sum(s["fixture_kind"] not in LEGACY_BUCKETS["fixture_kind"]
                                            for s in rows) / len(rows), 6),
        }
    values = {a: v["normalised_effective_number"] for a, v in axes.items()
              if v["normalised_effective_number"] is not None}
    worst = min(values, key=lambda a: (values[a], a)) if values else None
    totals = {
        "n": len(sigs),
        "axes": len(axes),
        "mean_normalised_effective_number": round(sum(values.values()) / len(values), 6) if values else None,
        "min_normalised_effective_number": values[worst] if worst else None,
        "least_balanced_axis": worst,
        "anchor_rate": round(sum(1 for s in sigs if s["anchor"]) / len(sigs), 6) if sigs else None,
        "distinct_skill_sets": len({(s["domain"], s["skill_type"], tuple(s["skills"])) for s in sigs}),
        "by_corpus_kind": by_kind,
    }
    return {"axes": dict(sorted(axes.items())), "totals": totals}


def verifier_kind_honour(draw: Draw) -> dict:
    """Requested (the corpus kinds' weights) against asked (after each domain's restriction) and
    honoured by a family's own final test: what the run's verifier-kind diversity really is."""
    by_domain = draw.verifier_kinds_by_domain
    requested = Counter(draw.requested_verifier_kinds)
    asked = Counter(s["verifier_kind"] for s in draw.signatures)
    moved = Counter(f"{r} -> {s['verifier_kind']}" for s, r in zip(draw.signatures, draw.requested_verifier_kinds)
                    if r != s["verifier_kind"])
    honoured = Counter(s["verifier_kind"] for s in draw.signatures
                       if by_domain is None or s["verifier_kind"] in by_domain.get(s["domain"], ()))
    n = len(draw.signatures)
    return {"restricted": by_domain is not None,
            "honourable_by_domain": {d: list(v) for d, v in (by_domain or {}).items()},
            "requested": {v: requested[v] for v in VERIFIER_KINDS if requested[v]},
            "asked": {v: asked[v] for v in VERIFIER_KINDS if asked[v]},
            "redirected": dict(sorted(moved.items())),
            "honoured_by_family": {v: honoured[v] for v in VERIFIER_KINDS if honoured[v]},
            "honoured_share": round(sum(honoured.values()) / n, 6) if n and by_domain is not None else None,
            # Signatures whose domain honours no kind their corpus kind weighs (rl_v2 where every
            # family grades exact text): asked a kind the domain honours instead, never one a
            # program beside the task would have to supply.
            "outside_corpus_weights": {f"{k}/{d}": c for (k, d), c in sorted(Counter(
                (s["corpus_kind"], s["domain"]) for s in draw.signatures
                if (s["corpus_kind"], s["domain"]) in draw.outside_corpus_weights).items())}}


def anchor_honour(draw: Draw, taxonomy: dict) -> dict:
    """Anchors drawn (the taxonomy's, before the restriction) against asked (an anchor a task of the
    domain can bear): which anchors the run cannot make load-bearing and how many draws that dropped."""
    by_domain = draw.anchors_by_domain
    requested = [a for a in draw.requested_anchors or [] if a]
    asked = [s["anchor"] for s in draw.signatures if s["anchor"]]
    moved = Counter(f"{r} -> {s['anchor']}" for s, r in zip(draw.signatures, draw.requested_anchors or [])
                    if r and s["anchor"] and r != s["anchor"])
    dropped = Counter(s["domain"] for s, r in zip(draw.signatures, draw.requested_anchors or [])
                      if r and not s["anchor"])
    return {"restricted": by_domain is not None,
            "load_bearing_by_domain": {d: list(v) for d, v in (by_domain or {}).items()},
            "never_drawn_by_domain": {d: [a for a in taxonomy["domains"][d]["anchors"] if a not in v]
                                      for d, v in (by_domain or {}).items()},
            "requested": len(requested), "asked": len(asked),
            "redirected": dict(sorted(moved.items())), "dropped_by_domain": dict(sorted(dropped.items()))}


def write_stats(path: str | Path, stats: dict) -> None:
    atomic_write_json(path, stats)
