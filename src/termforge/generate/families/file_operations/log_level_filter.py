"""Filter rotated log files by service and level, merged in timestamp order."""

from __future__ import annotations

import random

from termforge.generate.base import (DifficultyKnobs, FamilyAxes, TaskFamily, TaskSpec, bash_script, complexity_level,
                                     instruction_frame, pytest_module)


LEVELS = ("DEBUG", "INFO", "WARN", "ERROR")
SERVICES = ("auth", "billing", "search", "gateway", "scheduler", "storage")


class LogLevelFilter(TaskFamily):
    """Extract the ERROR lines of one service from rotated logs, in time order."""

    knobs = DifficultyKnobs(rotated_files=((2, 3), (2, 4), (4, 6), (6, 9)),
                            lines_per_file=((12, 24), (20, 40), (60, 120), (150, 300)))
    axes = FamilyAxes(name="log_level_filter", domains=("file_operations",), verifier_kinds=("exact_text",),
                      fixture_kinds=("text_only",), skill_types=("search_and_selection",), skills=(),
                      languages=("bash", "awk", "python"), command_complexities=("bash_only", "bash_code"),
                      summary="filter rotated log files by service and level, sorted by timestamp")
    method = (
        ('Concatenate the rotated files, filter on the service and level fields (not on substrings of the '
         'message), then sort numerically on the timestamp.', None),
    )


    def build(self, sig: dict, rng: random.Random) -> TaskSpec:
        level = complexity_level(sig)
        knobs = self.knobs.at(level)
        service = rng.choice(SERVICES)
        n_files = rng.randint(*knobs.rotated_files)
        per_file = knobs.lines_per_file
        fixtures: dict[str, bytes] = {}
        wanted: list[tuple[int, str]] = []
        for f in range(n_files):
            lines = []
            for _ in range(rng.randint(*per_file)):
                ts = rng.randint(1_700_000_000, 1_700_100_000)
                svc, lvl = rng.choice(SERVICES), rng.choice(LEVELS)
                msg = f"req={rng.randint(1000, 9999)} code={rng.randint(100, 599)}"
                if level >= 2 and rng.random() < 0.2:
                    # Decoys for substring matching: the level and service words inside the message.
                    msg += f" upstream={rng.choice(SERVICES)} last={rng.choice(LEVELS)}"
                line = f"{ts} {svc} {lvl} {msg}"
                lines.append(line)
                if svc == service and lvl == "ERROR":
                    wanted.append((ts, line))
            fixtures[f"logs/app.log.{f}"] = ("\n".join(lines) + "\n").encode()
        if not wanted:  # guarantee a non-empty answer
            ts = 1_700_050_000
            line = f"{ts} {service} ERROR req=4242 code=503"
            fixtures["logs/app.log.0"] += (line + "\n").encode()
            wanted.append((ts, line))
        expected = [line for _, line in sorted(wanted, key=lambda t: (t[0], t[1]))]
        out = "/app/errors.txt"
        instruction = instruction_frame(
            sig, "Collect one service's errors",
            f"""
            Our rotated logs are in `/app/logs/` (`app.log.0`, `app.log.1`, ...). Each line is
            `<unix-timestamp> <service> <LEVEL> <message>`. I need every `ERROR` line of the
            `{service}` service across all files, oldest first (ties: by the whole line).
            """,
            [f"`{out}`: the matching lines, unchanged, one per line, sorted as described."],
        )
        test_initial = pytest_module(f"""
            import os

            def test_logs_present():
                names = sorted(os.listdir("/app/logs"))
                assert len(names) == {n_files}

            def test_no_output_yet():
                assert not os.path.exists("{out}")
        """)
        test_final = pytest_module(f"""
            EXPECTED = {expected!r}

            def test_errors_extracted():
                with open("{out}") as fh:
                    got = [line.rstrip("\\n") for line in fh if line.strip()]
                assert got == EXPECTED
        """)
        solve = bash_script(f"""
            cat /app/logs/app.log.* | awk '$2 == "{service}" && $3 == "ERROR"' | sort -n -k1,1 -k2 > {out}
        """)
        # A second reference implementation, written apart from the oracle (Python, the whole line
        # as the tie-break): validation requires it to score 1 as well (solution/alternatives/).
        second = bash_script(f"""
            /usr/bin/python3 - <<'PY'
            import glob
            rows = []
            for path in glob.glob("/app/logs/app.log.*"):
                with open(path) as fh:
                    for line in fh:
                        parts = line.split()
                        if len(parts) >= 3 and parts[1] == "{service}" and parts[2] == "ERROR":
                            rows.append((int(parts[0]), line.rstrip("\\n")))
            with open("{out}", "w") as fh:
                fh.writelines(line + "\\n" for _, line in sorted(rows))
            PY
        """)
        return TaskSpec(
            alternatives={"python": second},
            instruction=instruction,
            setup_sh=bash_script("mkdir -p /app/logs && cp /tmp/env/fixtures/logs/* /app/logs/"),
            test_initial=test_initial,
            test_final=test_final,
            solve_sh=solve,
            truth={"given": {"service": service}, "expected_lines": expected},
            verifier_kind="exact_text",
            fixture_kind="text_only",
            fixtures=fixtures,
            output_paths=[out],
        )


FAMILY = LogLevelFilter
