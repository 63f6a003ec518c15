"""Final state: /app/stats.py computes medians and nearest-rank percentiles correctly.

The agent's module runs in a subprocess, never imported into the grader's process: each test
sends a batch of calls and gets back each call's value or the name of the exception it raised."""

import json
import math
import random
import subprocess

STATS = "/app/stats.py"

RUNNER = r"""
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("stats_under_test", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
out = []
for name, args in json.loads(sys.stdin.read()):
    before = json.dumps(args)
    try:
        value = getattr(module, name)(*args)
        out.append({"value": value, "modified": json.dumps(args) != before})
    except Exception as exc:
        out.append({"error": type(exc).__name__})
print(json.dumps(out))
"""


def call_all(calls):
    res = subprocess.run(["/usr/bin/python3", "-I", "-c", RUNNER, STATS], input=json.dumps(calls),
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr[-2000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert isinstance(out, list) and len(out) == len(calls)
    return out


def values(calls):
    out = call_all(calls)
    for call, r in zip(calls, out):
        assert "value" in r, (call, r)
    return [r["value"] for r in out]


def reference_median(vals):
    s = sorted(vals)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def reference_percentile(vals, p):
    s = sorted(vals)
    return s[max(1, math.ceil(p / 100 * len(s))) - 1]


def test_median_examples():
    assert values([["median", [[7]]], ["median", [[9, 1]]], ["median", [[3, 9, 1, 7]]],
                   ["median", [[10, 2, 38, 23, 38, 23, 21]]]]) == [7, 5, 5, 23]


def test_median_random():
    rng = random.Random(2024)
    cases = [[rng.randint(-50, 50) for _ in range(rng.randint(1, 12))] for _ in range(200)]
    got = values([["median", [v]] for v in cases])
    for v, g in zip(cases, got):
        assert g == reference_median(v), v


def test_percentile_examples():
    data = [15, 20, 35, 40, 50]
    ps = [5, 30, 40, 50, 100, 0]
    assert values([["percentile", [data, p]] for p in ps]) == [15, 20, 20, 35, 50, 15]


def test_percentile_random():
    rng = random.Random(7)
    cases = []
    for _ in range(200):
        vals = [rng.randint(0, 1000) for _ in range(rng.randint(1, 15))]
        cases.append((vals, rng.choice([0, 1, 10, 25, 33.3, 50, 66.7, 75, 90, 99, 100])))
    got = values([["percentile", [v, p]] for v, p in cases])
    for (v, p), g in zip(cases, got):
        assert g == reference_percentile(v, p), (v, p)


def test_inputs_not_modified():
    vals = [5, 3, 9, 1, 7, 2]
    out = call_all([["median", [vals]], ["percentile", [vals, 50]]])
    assert all("value" in r and r["modified"] is False for r in out), out


def test_errors():
    out = call_all([["median", [[]]], ["percentile", [[], 50]], ["percentile", [[1, 2], 101]],
                    ["percentile", [[1, 2], -1]]])
    assert [r.get("error") for r in out] == ["ValueError"] * 4, out


def test_mean_unchanged():
    out = call_all([["mean", [[1, 2, 3, 4]]], ["mean", [[]]]])
    assert out[0].get("value") == 2.5 and out[1].get("error") == "ValueError", out
