"""Apply an ordered, first-match glob-to-mode policy to a service tree."""

from __future__ import annotations

import fnmatch
import posixpath
import random

from termforge.generate.base import (DifficultyKnobs, FamilyAxes, TaskFamily, TaskSpec, bash_script, complexity_level,
                                     instruction_frame)
from termforge.generate.families.sources import packaged_source, python_oracle


SRV_LAYOUT = {
    "bin": ("backup", "rotate-logs", "healthcheck"),
    "scripts": ("deploy.sh", "migrate.sh", "seed_db.py", "notes.txt"),
    "scripts/cron": ("nightly.sh", "cleanup.sh", "README"),
    "conf": ("app.conf", "db.conf", "nginx.conf", "logging.yaml"),
    "secrets": ("tls.pem", "tls.key", "api_token", ".env"),
    "logs": ("access.log", "error.log", "audit.log"),
    "www": ("index.html", "app.css", "app.js", ".env", "robots.txt"),
    "www/assets": ("logo.svg", "font.woff2"),
    "data": ("users.db", "cache.bin", "export.csv"),
    ".": ("Makefile", "README.md", "VERSION"),
}
# (pattern, candidate modes); the policy draws a mode for each and shuffles their order.
RULE_TEMPLATES = (
    ("secrets/*", ("0600", "0400")),
    ("*.key", ("0400", "0600")),
    ("*.pem", ("0640", "0600", "0444")),
    ("*.sh", ("0755", "0750")),
    ("scripts/cron/*.sh", ("0700", "0750")),
    ("bin/*", ("0755", "0750", "0711")),
    ("*.env", ("0600", "0640")),
    ("logs/*", ("0640", "0600")),
    ("www/*", ("0644", "0444")),
    ("conf/*.conf", ("0640", "0644")),
    ("*.py", ("0755", "0644")),
    ("data/*", ("0660", "0600")),
    ("?ake*", ("0644", "0664")),
)
# Symlinks planted in complex trees: (link path, candidate targets), all relative to /app/srv.
LINK_PLANS = (
    ("www/current.key", ("secrets/tls.key", "secrets/tls.pem")),
    ("bin/deploy.sh", ("scripts/deploy.sh", "scripts/migrate.sh")),
    ("logs/latest.env", ("secrets/.env", "www/.env")),
    ("scripts/cron/run.sh", ("bin/backup", "bin/rotate-logs")),
    ("www/assets/bundle.py", ("scripts/seed_db.py", "data/export.csv")),
)
INITIAL_MODES = (0o644, 0o664, 0o666, 0o755, 0o777, 0o600, 0o700, 0o640, 0o775)


class PermissionPolicy(TaskFamily):
    """Apply a first-match-wins glob permission policy to the regular files of a tree, sparing symlinks."""

    knobs = DifficultyKnobs(directories=(4, 6, 8, len(SRV_LAYOUT)), rules=(6, 8, 10, 12))
    axes = FamilyAxes(name="permission_policy", domains=("system_administration",), verifier_kinds=("exact_text",),
                      fixture_kinds=("text_only",), skill_types=(), skills=(), languages=("bash", "python"),
                      command_complexities=("bash_only", "bash_code"), output_files=False,
                      summary="apply an ordered glob-to-mode policy to a service tree with chmod (first match wins)")
    method = (
        ('Walk the tree listing regular files only (find -type f skips symlinks), compute each path relative '
         'to /app/srv, and test the policy rules in file order, stopping at the first match; glob matching '
         "where * crosses slashes is what bash's [[ $path == $glob ]] and Python's fnmatch do. Watch for rules "
         'that are shadowed by an earlier, broader rule, for dotfiles, and for links (chmod follows them). '
         "Verify with stat -c '%a %n'.", None),
    )


    def build(self, sig: dict, rng: random.Random) -> TaskSpec:
        lvl = complexity_level(sig)
        knobs = self.knobs.at(lvl)
        dirs = sorted(SRV_LAYOUT)
        n_dirs = knobs.directories
        chosen_dirs = sorted(rng.sample(dirs, n_dirs))
        files: list[str] = []
        for d in chosen_dirs:
            names = SRV_LAYOUT[d]
            for name in rng.sample(names, max(2, len(names) - rng.randint(0, 1))):
                files.append(name if d == "." else f"{d}/{name}")
        files.sort()
        rules = [(pat, rng.choice(modes)) for pat, modes in rng.sample(RULE_TEMPLATES, knobs.rules)]
        catch_all = rng.random() < 0.5
        if catch_all:
            rules.append(("*", rng.choice(("0644", "0640"))))

        def policy_mode(rel: str) -> int | None:
            for pat, mode in rules:
                if fnmatch.fnmatchcase(rel, pat):
                    return int(mode, 8)
            return None

        initial = {rel: rng.choice(INITIAL_MODES) for rel in files}
        expected = {rel: (policy_mode(rel) if policy_mode(rel) is not None else initial[rel]) for rel in files}
        changing = [rel for rel in files if expected[rel] != initial[rel]]
        if len(changing) < 3:
            for rel in [r for r in files if policy_mode(r) is not None][:3]:
                initial[rel] = 0o777 if expected[rel] != 0o777 else 0o600

        links: dict[str, str] = {}
        if lvl >= 2:
            # Links whose own names match a different rule than their targets do: following them
            # with chmod gives the target the wrong mode.
            for link, targets in LINK_PLANS:
                link_dir = posixpath.dirname(link)
                link_mode = policy_mode(link)
                if link_dir not in chosen_dirs or link in files or link_mode is None:
                    continue
                for target in targets:
                    if target in files and expected[target] != link_mode:
                        links[link] = posixpath.relpath(target, link_dir)
                        break
                if len(links) == 2:
                    break

        policy_text = (
            "# perms.policy - one rule per line: <glob> <octal mode>\n"
            "# The first rule whose glob matches a file's path (relative to /app/srv) decides its mode.\n"
            + "".join(f"{pat:<22} {mode}\n" for pat, mode in rules)
        )
        setup_lines = ["mkdir -p /app/srv", "cp -r /tmp/env/fixtures/srv/. /app/srv/",
                       "cp /tmp/env/fixtures/perms.policy /app/perms.policy"]
        setup_lines += [f"chmod {initial[rel]:04o} '/app/srv/{rel}'" for rel in files]
        setup_lines += [f"ln -s '{target}' '/app/srv/{name}'" for name, target in sorted(links.items())]
        # Directories get a known mode so the final test can check they were left alone.
        dir_modes = {d: 0o750 for rel in files for d in _parents(rel)}
        setup_lines += [f"chmod {mode:04o} '/app/srv/{d}'" for d, mode in sorted(dir_modes.items())]
        fixtures = {f"srv/{rel}": f"{rel} v{rng.randint(1, 9)}\n".encode() for rel in files}
        fixtures["perms.policy"] = policy_text.encode()

        out_note = "Files that no rule matches keep their current mode." if not catch_all else ""
        link_note = ("Some entries under `/app/srv` are symbolic links: leave them, and the files they "
                     "point to, alone (a link's target gets the mode of its own path, never the link's).")
        body = (
            "Our service tree `/app/srv` drifted from its permission policy. `/app/perms.policy` lists "
            "rules `<glob> <octal mode>`, one per line (`#` starts a comment). For every regular file "
            "under `/app/srv`, the first rule whose glob matches the file's path relative to `/app/srv` "
            "(e.g. `conf/app.conf`) sets its mode. Globs use `*` (any characters, including `/`) and "
            "`?` (one character); dotfiles are not special. " + (out_note + " " if out_note else "")
            + "Directories are not part of the policy: leave them as they are."
            + (f"\n\n{link_note}" if links else "")
            + "\n\nDon't create, delete or rename anything."
        )
        instruction = instruction_frame(sig, "Re-apply the permission policy", body,
                                        ["Every regular file under `/app/srv` carries the mode the policy gives it."])
        test_initial = packaged_source(__name__, "test_initial_state.py.txt", INITIAL=initial, LINKS=links)
        test_final = packaged_source(__name__, "test_final_state.py.txt", EXPECTED=expected, LINKS=links,
                                     DIR_MODES=dir_modes)
        solve = python_oracle(packaged_source(__name__, "oracle.py.txt"))
        return TaskSpec(
            instruction=instruction,
            setup_sh=bash_script("\n".join(setup_lines)),
            test_initial=test_initial,
            test_final=test_final,
            solve_sh=solve,
            truth={"given": {"catch_all_rule": catch_all},
                   "expected_modes": [f"{rel} {mode:04o}" for rel, mode in sorted(expected.items())],
                   "files_to_change": [f"{rel} {initial[rel]:04o}->{expected[rel]:04o}" for rel in files
                                       if initial[rel] != expected[rel]],
                   "symlinks": [f"{name} -> {target}" for name, target in sorted(links.items())]},
            verifier_kind="exact_text",
            fixture_kind="text_only",
            fixtures=fixtures,
            output_paths=[],
        )


def _parents(rel: str) -> list[str]:
    parts = rel.split("/")[:-1]
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


FAMILY = PermissionPolicy
