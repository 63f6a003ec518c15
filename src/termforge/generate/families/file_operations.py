"""file_operations families."""

from __future__ import annotations

import random

from termforge.generate.base import TaskFamily, TaskSpec, bash_script, instruction_frame, pytest_module

LEVELS = ("DEBUG", "INFO", "WARN", "ERROR")
SERVICES = ("auth", "billing", "search", "gateway", "scheduler", "storage")


class LogLevelFilter(TaskFamily):
    """Extract the ERROR lines of one service from rotated logs, in time order."""

    name = "log_level_filter"
    domains = ("file_operations",)
    verifier_kinds = ("exact_text",)
    fixture_kinds = ("text_only",)
    summary = "filter rotated log files by service and level, sorted by timestamp"

    def build(self, sig: dict, rng: random.Random) -> TaskSpec:
        service = rng.choice(SERVICES)
        n_files = rng.randint(2, 4)
        fixtures: dict[str, bytes] = {}
        wanted: list[tuple[int, str]] = []
        for f in range(n_files):
            lines = []
            for _ in range(rng.randint(20, 40)):
                ts = rng.randint(1_700_000_000, 1_700_100_000)
                svc, lvl = rng.choice(SERVICES), rng.choice(LEVELS)
                msg = f"req={rng.randint(1000, 9999)} code={rng.randint(100, 599)}"
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
        return TaskSpec(
            instruction=instruction,
            setup_sh=bash_script("mkdir -p /app/logs && cp /tmp/env/fixtures/logs/* /app/logs/"),
            test_initial=test_initial,
            test_final=test_final,
            solve_sh=solve,
            truth={"given": {"service": service}, "expected_lines": expected},
            method_note="Concatenate the rotated files, filter on the service and level fields "
                        "(not on substrings of the message), then sort numerically on the timestamp.",
            verifier_kind="exact_text",
            fixture_kind="text_only",
            fixtures=fixtures,
            output_paths=[out],
        )


FAMILIES = [LogLevelFilter]
