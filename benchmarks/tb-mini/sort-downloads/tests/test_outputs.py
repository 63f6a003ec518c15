"""Final state: /app/sorted holds the deduplicated files by extension, with a sha256 manifest."""

import hashlib
from pathlib import Path

SORTED = Path("/app/sorted")
DOWNLOADS = Path("/app/downloads")
EXPECTED = {
    "bak/Makefile.bak": "668b5bdcb917fa46983c7a161392ba344fc40b1a0bb03cadae87e2cae88242cb",
    "csv/data copy.csv": "20b4d2f42cdde6166847688533a948d66b99d319474914b7bebbc8678a08f105",
    "gz/archive.tar.gz": "7510943b42e5a8356e8c8d27d5049bf69cb066af92015e8afb042c00f48e086b",
    "jpg/Photo2.JPG": "62a121c7a65d553757b47f710e916e578898ba40b9adecc78e1a3ec83c7d2054",
    "jpg/photo1-copy.jpg": "7dab561197f0ce7c5024a9b9a341e117f72d98ca89a153fe7d4ee7f6ce9caa5f",
    "other/README": "35ea958efa6a03d1eb40e5ef5d354c6103a4302fdb51f3f37901bdc873e41824",
    "pdf/report.PDF": "a009b5da548ddd57b81c3baf1d97fb7cc8669a6e9fe1f802966ceca0a00e6c1a",
    "pdf/scan.pdf": "2d55c0d597e970c206904e3c063f6ee7897b0e072c3c916b76a198d123f448c7",
    "txt/notes.txt": "05ca71b7117d8b78f2adc4ca48bfcfbcebab35eb64fa2da9474c78e492ca9af5",
    "txt/todo.txt": "ef1f3fd16afc1991531ad6e40af0f1d8ef8af7be1e873c63626f75d9ba6d6c64",
}


def sorted_files():
    return {p.relative_to(SORTED).as_posix(): p for p in SORTED.rglob("*") if p.is_file()}


def test_sorted_tree_exact():
    files = sorted_files()
    files.pop("MANIFEST", None)
    assert sorted(files) == sorted(EXPECTED)


def test_contents_unchanged():
    for rel, path in sorted_files().items():
        if rel != "MANIFEST":
            assert hashlib.sha256(path.read_bytes()).hexdigest() == EXPECTED[rel], rel


def test_downloads_keeps_only_hidden():
    assert sorted(p.name for p in DOWNLOADS.iterdir()) == [".hidden_config"]
    assert (DOWNLOADS / ".hidden_config").read_text() == "theme=dark\n"


def test_manifest():
    lines = (SORTED / "MANIFEST").read_text().splitlines()
    assert lines == [f"{EXPECTED[rel]}  {rel}" for rel in sorted(EXPECTED)]
