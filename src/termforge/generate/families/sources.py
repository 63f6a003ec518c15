"""The task sources several families build alike: pytest modules with baked constants (written
here or shipped as a family's package file), python oracles, CSV fixture text."""

from __future__ import annotations

import csv
import io
import textwrap

from termforge.generate.base import bash_script
from termforge.generate.families.package_files import family_template


def py_source(body: str, **constants) -> str:
    """A Python source whose `__CONSTANTS__` line becomes one assignment per constant (repr'd),
    so baked values never pass through f-string brace escaping."""
    consts = "".join(f"{name} = {value!r}\n" for name, value in constants.items())
    return textwrap.dedent(body).strip().replace("__CONSTANTS__", consts.rstrip("\n")) + "\n"


def packaged_source(family_module: str, file_name: str, **constants) -> str:
    """py_source over one of the family's package files (package_files.family_template): a test or
    oracle whose text is fixed and whose task values arrive as constants."""
    return py_source(family_template(family_module, file_name), **constants)


def lines_final_test(test_name: str, out: str, expected: list[str]) -> str:
    """A final test: the non-blank lines of `out` are exactly `expected`, in order."""
    return py_source(f"""
        __CONSTANTS__

        def {test_name}():
            with open(OUT) as fh:
                got = [line.rstrip("\\n") for line in fh if line.strip()]
            assert got == EXPECTED
        """, OUT=out, EXPECTED=expected)


def csv_inputs_initial_test(row_counts: dict[str, int], out: str) -> str:
    """An initial-state test: each CSV under /app/data has its header and row count; no output yet."""
    return py_source("""
        import csv
        import os

        __CONSTANTS__

        def test_inputs_present():
            for name, rows in ROW_COUNTS.items():
                with open(f"/app/data/{name}", newline="") as fh:
                    assert sum(1 for _ in csv.reader(fh)) == rows + 1

        def test_no_report_yet():
            assert not os.path.exists(OUT)
        """, ROW_COUNTS=row_counts, OUT=out)


def python_oracle(code: str) -> str:
    """An oracle solve.sh that runs `code` with the sandbox's Debian Python."""
    return bash_script("/usr/bin/python3 - <<'PY'\n" + code + "PY")


def csv_text(header: list[str], rows: list[list[str]]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buf.getvalue()
