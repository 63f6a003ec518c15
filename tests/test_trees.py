"""runtime/trees.py: the host's only way to walk, measure, digest, copy and remove what a sandbox
wrote. Iterative, descriptor-relative, bounded, never following a symlink, never raising on the
tree's content (the attack suite runs it inside real sessions; these are its unit tests)."""

import os
import stat

from termforge.runtime.trees import Bounds, TreeWalk, allocated, copy_tree, digest_entries, remove_tree


def _chain(root, depth, name="d"):
    fd = os.open(root, os.O_RDONLY)
    try:
        for _ in range(depth):
            os.mkdir(name, dir_fd=fd)
            nxt = os.open(name, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = nxt
    finally:
        os.close(fd)


def test_walk_stops_at_each_bound_and_says_why(tmp_path):
    _chain(tmp_path, 200)
    walk = TreeWalk(tmp_path, Bounds(depth=50, entries=10_000, seconds=None))
    assert sum(1 for _ in walk) == 50 and walk.incomplete.startswith("deeper than 50 levels")
    wide = tmp_path / "wide"
    wide.mkdir()
    for i in range(300):
        (wide / f"f{i}").touch()
    walk = TreeWalk(wide, Bounds(depth=10, entries=100, seconds=None))
    assert sum(1 for _ in walk) == 100 and walk.incomplete == "more than 100 entries"
    walk = TreeWalk(wide, Bounds(depth=10, entries=1000, seconds=None))
    assert sum(1 for _ in walk) == 300 and walk.incomplete is None


def test_walk_never_follows_symlinks_and_names_paths_past_path_max(tmp_path):
    (tmp_path / "loop").symlink_to(".")
    (tmp_path / "up").symlink_to("/")
    os.mkfifo(tmp_path / "pipe")
    _chain(tmp_path, 30, "n" * 255)  # 7,680 characters of path: past PATH_MAX, walked by descriptor
    walk = TreeWalk(tmp_path)
    entries = {e.rel.split("/")[0]: e for e in walk}
    assert walk.incomplete is None and walk.entries == 33
    assert stat.S_ISLNK(entries["loop"].st.st_mode) and stat.S_ISFIFO(entries["pipe"].st.st_mode)


def test_allocated_counts_sparse_files_as_allocated_and_hard_links_once(tmp_path):
    with open(tmp_path / "sparse", "wb") as f:
        f.truncate(1 << 30)
    (tmp_path / "data").write_bytes(b"x" * (1 << 20))
    for i in range(5):
        os.link(tmp_path / "data", tmp_path / f"link{i}")
    m = allocated([tmp_path])
    assert m.incomplete is None and (1 << 20) <= m.bytes < (2 << 20)


def test_digest_is_a_function_of_the_tree_even_when_incomplete(tmp_path):
    (tmp_path / "a").write_text("1")
    (tmp_path / "b").symlink_to("a")
    _chain(tmp_path, 20)
    first = digest_entries(tmp_path, Bounds(depth=5, seconds=None))
    assert first == digest_entries(tmp_path, Bounds(depth=5, seconds=None))
    assert first[-1][0] == "!incomplete" and ["b", "link", "a"] in first


def test_copy_tree_keeps_modes_times_and_links_and_never_writes_through_a_link(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "run.sh").write_text("#!/bin/sh\n")
    (src / "sub" / "run.sh").chmod(0o751)
    os.utime(src / "sub" / "run.sh", (1_000_000, 1_000_000))
    (src / "ro").mkdir()
    (src / "ro").chmod(0o555)
    (src / "link").symlink_to("/etc/passwd")
    os.mkfifo(src / "pipe")
    outside = tmp_path / "outside"
    outside.mkdir()
    dst.mkdir()
    (dst / "sub").symlink_to(outside)  # a symlink where a directory goes is replaced, not followed
    problems = copy_tree(src, dst)
    assert problems == ["pipe is a FIFO (not copied)"]
    assert not (dst / "sub").is_symlink() and not list(outside.iterdir())
    st = os.stat(dst / "sub" / "run.sh")
    assert stat.S_IMODE(st.st_mode) == 0o751 and st.st_mtime == 1_000_000
    assert stat.S_IMODE(os.stat(dst / "ro").st_mode) == 0o555 and os.readlink(dst / "link") == "/etc/passwd"


def test_remove_tree_removes_what_python_cannot(tmp_path):
    root = tmp_path / "t"
    root.mkdir()
    _chain(root, 1500, "d" * 100)
    (root / "locked").mkdir()
    (root / "locked" / "f").touch()
    (root / "locked").chmod(0)
    os.mkfifo(root / "pipe")
    assert remove_tree(root) == [] and not root.exists()
    assert remove_tree(root) == []  # already gone: nothing to do
    (tmp_path / "file").touch()
    assert remove_tree(tmp_path / "file") == [] and not (tmp_path / "file").exists()


def test_names_that_are_not_utf8_are_recorded_as_text(tmp_path):
    """Issue 39: a name is whatever bytes an agent chose; what records it (findings, problems,
    JSON artefacts, hashes) keeps it as text and never fails."""
    from termforge.io import atomic_write_json, canonical_json, read_json, stable_hash
    from termforge.runtime.trees import printable, unicode_text

    odd = os.fsdecode(b"\xff\xfe")
    assert printable(odd) == "\\xff\\xfe" and printable(b"a\xffb") == "a\\xffb"
    assert printable("two\nlines\x1b[2J") == "two\\nlines\\x1b[2J" and printable("caf\u00e9") == "caf\u00e9"
    assert unicode_text("a\nb" + odd) == "a\nb\\xff\\xfe" and unicode_text("\ud800x") == "\\ud800x"
    (tmp_path / "t").mkdir()
    (tmp_path / os.fsdecode(b"t/\xff\xfe")).write_text("x")
    os.symlink(os.fsdecode(b"/\xfe/target"), tmp_path / os.fsdecode(b"t/l\xff"))
    entries = digest_entries(tmp_path / "t")
    assert stable_hash(entries) != stable_hash([[e[0] + "x", *e[1:]] for e in entries])
    atomic_write_json(tmp_path / "out.json", {"names": entries})
    assert read_json(tmp_path / "out.json") == {"names": entries}  # the very same names read back
    assert canonical_json([odd]) == '["\\udcff\\udcfe"]' and canonical_json(["caf\u00e9"]) == '["caf\u00e9"]'
