"""Find files of identical content in a tree, keep one canonical copy of each and report."""

from __future__ import annotations

import hashlib
import random

from termforge.generate.base import (DifficultyKnobs, FamilyAxes, TaskFamily, TaskSpec, bash_script, complexity_level,
                                     instruction_frame)
from termforge.generate.families.sources import packaged_source, python_oracle


LIBRARY_DIRS = ("inbox", "docs", "docs/old drafts", "photos/2023", "photos/2024", "backup", "backup/phone",
                "music", "Archive", "Archive/2019")
LIBRARY_NAMES = ("IMG_0412.jpg", "IMG_0413.jpg", "scan 3.png", "report final.pdf", "notes.txt", "budget.xlsx",
                 "song.mp3", "README", "todo.md", "invoice-2291.pdf", "contacts.vcf", "draft (1).txt",
                 "holiday.mov", "letter.docx", "keys.txt", "photo.heic")
WORDS = ("alpha", "ledger", "quarter", "meeting", "draft", "review", "invoice", "holiday", "river", "budget")


class DuplicateFilePruner(TaskFamily):
    """Remove byte-identical duplicate files, keeping the first path in byte order, and report each removal."""

    knobs = DifficultyKnobs(unique_contents=(6, 12, 22, 36), directories=(5, 7, 10, 10))
    axes = FamilyAxes(name="duplicate_file_pruner", domains=("file_operations",), verifier_kinds=("exact_text",),
                      fixture_kinds=("text_only",), skill_types=("search_and_selection",),
                      skills=("find duplicate files by content digest",), languages=("bash", "python"),
                      command_complexities=("bash_only", "bash_code"),
                      summary="find files with identical content (hashing, not names or sizes), keep one canonical "
                              "copy, report")
    method = (
        ('Group files by a content hash (sha256sum), never by name or size, and confirm that empty files form '
         'a group too. Within each group sort the relative paths with LC_ALL=C sort, keep the first and delete '
         'the rest, quoting every path (names contain spaces and may start with a dash, so use -- or ./ '
         'prefixes). Write the report before deleting or from the same listing, then re-hash the tree to check '
         'nothing unique was lost.', None),
    )


    def build(self, sig: dict, rng: random.Random) -> TaskSpec:
        lvl = complexity_level(sig)
        knobs = self.knobs.at(lvl)
        n_unique = knobs.unique_contents
        dirs = list(LIBRARY_DIRS[: knobs.directories])
        names = list(LIBRARY_NAMES)
        if lvl >= 2:
            names += ["-notes.txt", "--force.txt"]  # option-looking names break unquoted rm/xargs
        if lvl == 3:
            dirs += ["backup/phone/.sync", "inbox/2024 q3"]
            names += [".settings.json", "naïve résumé.txt"]

        def content_for(name: str) -> bytes:
            if name.endswith((".txt", ".md", "README", ".json")):
                return (" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 60))) + "\n").encode()
            return rng.randbytes(rng.randint(16, 3000))

        taken: set[str] = set()

        def fresh_path(name: str | None = None) -> str:
            while True:
                rel = f"{rng.choice(dirs)}/{name or rng.choice(names)}"
                if rel not in taken:
                    taken.add(rel)
                    return rel
                name = None

        files: dict[str, bytes] = {}
        for _ in range(n_unique):
            first = fresh_path()
            data = content_for(first)
            files[first] = data
            for _ in range(rng.choice((0, 0, 1, 1, 2, 3))):
                # Copies usually keep their name (a re-sync) but sometimes get a new one.
                files[fresh_path(first.rsplit("/", 1)[1] if rng.random() < 0.6 else None)] = data
            if lvl >= 1 and len(data) > 1 and rng.random() < 0.3:
                # Same size, one byte different: a size-only comparison calls these duplicates.
                twin = bytearray(data)
                pos = rng.randrange(len(twin))
                twin[pos] = (twin[pos] + 1) % 256
                files[fresh_path(first.rsplit("/", 1)[1])] = bytes(twin)
        if lvl >= 1:
            for _ in range(rng.randint(2, 3)):
                files[fresh_path()] = b""
        if len(set(files.values())) == len(files):
            files[fresh_path()] = files[min(files)]  # at least one duplicate group, always
        by_content: dict[bytes, list[str]] = {}
        for rel, data in files.items():
            by_content.setdefault(data, []).append(rel)

        report: list[tuple[str, str]] = []
        remaining: dict[str, str] = {}
        for data, paths in by_content.items():
            keep, *drop = sorted(paths)
            remaining[keep] = hashlib.sha256(data).hexdigest()
            report += [(rel, keep) for rel in drop]
        report_lines = [f"{removed}\t{kept}" for removed, kept in sorted(report)]
        out = "/app/dedupe_report.tsv"
        instruction = instruction_frame(
            sig, "Prune duplicate files",
            """
            `/app/library` has accumulated copies of the same files from several syncs. Two files
            are duplicates when their contents are byte-for-byte identical (names, sizes and dates
            don't matter; empty files are duplicates of each other). In every group of duplicates,
            keep the one whose path relative to `/app/library` sorts first in byte order (what
            `LC_ALL=C sort` does) and delete the others. Leave unique files and all directories in
            place. Some names contain spaces or other characters that need care.
            """,
            [f"`{out}`: one line per deleted file, `<deleted path>\\t<kept path>` (paths relative to "
             "`/app/library`, tab-separated), sorted by the deleted path in byte order.",
             "The duplicates are gone from `/app/library`; every kept file is unchanged."],
        )
        test_initial = packaged_source(__name__, "test_initial_state.py.txt", FILE_COUNT=len(files), OUT=out)
        test_final = packaged_source(__name__, "test_final_state.py.txt", REMAINING=dict(sorted(remaining.items())),
                                     REPORT=report_lines, OUT=out)
        solve = python_oracle(packaged_source(__name__, "oracle.py.txt"))
        return TaskSpec(
            instruction=instruction,
            setup_sh=bash_script("cp -r /tmp/env/fixtures/library /app/library"),
            test_initial=test_initial,
            test_final=test_final,
            solve_sh=solve,
            truth={"given": {}, "report_lines": report_lines, "kept_files": len(remaining),
                   "deleted_files": len(report_lines)},
            verifier_kind="exact_text",
            fixture_kind="text_only",
            fixtures={f"library/{rel}": data for rel, data in files.items()},
            output_paths=[out],
        )


FAMILY = DuplicateFilePruner
