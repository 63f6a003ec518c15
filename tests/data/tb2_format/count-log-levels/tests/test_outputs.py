from pathlib import Path


def test_levels_file_exists():
    assert Path("/app/levels.txt").exists()


def test_levels_counts():
    lines = Path("/app/levels.txt").read_text().strip().splitlines()
    assert lines == ["DEBUG 1", "ERROR 1", "INFO 4", "WARN 2"]
