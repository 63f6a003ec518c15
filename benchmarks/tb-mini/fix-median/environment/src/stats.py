"""Small statistics helpers used by the nightly latency report."""

import math


def mean(values):
    """Arithmetic mean of a non-empty sequence; ValueError when it is empty."""
    if not values:
        raise ValueError("mean of empty data")
    return sum(values) / len(values)


def median(values):
    """The middle value of the data in sorted order; for an even number of values, the mean of
    the two middle ones. ValueError when the data is empty."""
    if not values:
        raise ValueError("median of empty data")
    n = len(values)
    mid = n // 2
    if n % 2:
        return values[mid]
    return (values[mid] + values[mid + 1]) / 2


def percentile(values, p):
    """Nearest-rank percentile: the smallest value such that at least p percent of the data is
    less than or equal to it (rank = ceil(p / 100 * n), at least 1). p must be in [0, 100];
    ValueError otherwise, or when the data is empty."""
    if not values:
        raise ValueError("percentile of empty data")
    rank = int(p / 100 * len(values))
    return sorted(values)[rank]
