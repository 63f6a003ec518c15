import hashlib
from pathlib import Path


def test_manifest():
    lines = Path("/app/manifest.sha256").read_text().splitlines()
    expected = [f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.name}"
                for p in sorted(Path("/app/files").iterdir())]
    assert lines == expected
