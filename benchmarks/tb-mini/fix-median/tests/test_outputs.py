"""Final state: /app/stats.py computes medians and nearest-rank percentiles correctly."""

import importlib.util
import math
import random

import pytest

STATS = "/app/stats.py"


@pytest.fixture(scope="module")
def stats():
    spec = importlib.util.spec_from_file_location("stats_under_test", STATS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def reference_median(values):
    s = sorted(values)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def reference_percentile(values, p):
    s = sorted(values)
    return s[max(1, math.ceil(p / 100 * len(s))) - 1]


def test_median_examples(stats):
    assert stats.median([7]) == 7
    assert stats.median([9, 1]) == 5
    assert stats.median([3, 9, 1, 7]) == 5
    assert stats.median([10, 2, 38, 23, 38, 23, 21]) == 23


def test_median_random(stats):
    rng = random.Random(2024)
    for _ in range(200):
        values = [rng.randint(-50, 50) for _ in range(rng.randint(1, 12))]
        assert stats.median(values) == reference_median(values), values


def test_percentile_examples(stats):
    data = [15, 20, 35, 40, 50]
    assert stats.percentile(data, 5) == 15
    assert stats.percentile(data, 30) == 20
    assert stats.percentile(data, 40) == 20
    assert stats.percentile(data, 50) == 35
    assert stats.percentile(data, 100) == 50
    assert stats.percentile(data, 0) == 15


def test_percentile_random(stats):
    rng = random.Random(7)
    for _ in range(200):
        values = [rng.randint(0, 1000) for _ in range(rng.randint(1, 15))]
        p = rng.choice([0, 1, 10, 25, 33.3, 50, 66.7, 75, 90, 99, 100])
        assert stats.percentile(values, p) == reference_percentile(values, p), (values, p)


def test_inputs_not_modified(stats):
    values = [5, 3, 9, 1, 7, 2]
    snapshot = list(values)
    stats.median(values)
    stats.percentile(values, 50)
    assert values == snapshot


def test_errors(stats):
    for call in (lambda: stats.median([]), lambda: stats.percentile([], 50),
                 lambda: stats.percentile([1, 2], 101), lambda: stats.percentile([1, 2], -1)):
        with pytest.raises(ValueError):
            call()


def test_mean_unchanged(stats):
    assert stats.mean([1, 2, 3, 4]) == 2.5
    with pytest.raises(ValueError):
        stats.mean([])
