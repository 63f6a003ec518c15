"""Final state: /app/bin/errsum counts ERROR/CRITICAL lines per component, on any log."""

import os
import subprocess
import tempfile
from pathlib import Path

ERRSUM = Path("/app/bin/errsum")
SAMPLE = Path("/app/logs/app.log")
SAMPLE_EXPECTED = "14 mailer\n12 auth\n11 scheduler\n9 db\n8 api\n6 cache\n"

OTHER_LOG = """\
2024-06-02T00:00:01Z CRITICAL [billing.v2] card processor unreachable
2024-06-02T00:00:02Z ERROR [queue-worker] job 17 failed
2024-06-02T00:00:03Z INFO [billing.v2] ERROR retry scheduled
2024-06-02T00:00:04Z ERRORS [queue-worker] not a real level
2024-06-02T00:00:05Z ERROR [Alpha] upper-case component sorts first
2024-06-02T00:00:06Z ERROR [queue-worker] job 18 failed
2024-06-02T00:00:07Z WARN [alpha] slow
    Traceback (most recent call last):
2024-06-02T00:00:08Z ERROR [billing.v2] forwarded to [queue-worker]
2024-06-02T00:00:09Z ERROR [alpha] lower-case alpha is a different component
2024-06-02T00:00:10Z ERROR
"""
OTHER_EXPECTED = "2 billing.v2\n2 queue-worker\n1 Alpha\n1 alpha\n"


def run(*args):
    return subprocess.run([str(ERRSUM), *args], capture_output=True, text=True, timeout=30)


def test_script_is_executable():
    assert ERRSUM.is_file() and os.access(ERRSUM, os.X_OK)


def test_sample_log():
    res = run(str(SAMPLE))
    assert res.returncode == 0, res.stderr
    assert res.stdout == SAMPLE_EXPECTED


def test_other_log():
    with tempfile.TemporaryDirectory() as d:
        log = Path(d) / "other.log"
        log.write_text(OTHER_LOG)
        res = run(str(log))
    assert res.returncode == 0, res.stderr
    assert res.stdout == OTHER_EXPECTED


def test_log_without_errors_prints_nothing():
    with tempfile.TemporaryDirectory() as d:
        log = Path(d) / "quiet.log"
        log.write_text("2024-06-02T00:00:01Z INFO [api] all good\n")
        res = run(str(log))
    assert res.returncode == 0 and res.stdout == ""


def test_missing_file_and_usage():
    missing = run("/nonexistent/app.log")
    assert missing.returncode == 1 and missing.stdout == "" and missing.stderr.strip()
    usage = run()
    assert usage.returncode == 2 and usage.stdout == "" and usage.stderr.strip()
