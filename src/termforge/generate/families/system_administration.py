"""system_administration families that stay inside /app: an account audit over passwd-style files,
and applying a first-match permission policy to a tree."""

from __future__ import annotations

import fnmatch
import posixpath
import random

from termforge.generate.base import TaskFamily, TaskSpec, bash_script, instruction_frame
from termforge.generate.base import complexity_level
from termforge.generate.families.scientific_computing import lines_final_test, py_source, python_oracle

PEOPLE = ("ana", "anabel", "bruno", "chen", "dara", "eli", "elif", "farah", "goran", "hana", "ivo", "jin",
          "kofi", "lena", "lenart", "mila", "noor", "omar", "pia", "quinn", "rafa", "sana", "tomas", "uma",
          "vik", "wen", "xia", "yusuf", "zoe", "amir", "bea", "cleo", "dmitri", "esme", "felix", "gita",
          "hugo", "iris", "jonas", "kim", "lior", "maya", "nils", "olga", "priya", "rhys", "sven", "tara",
          "ugo", "vera", "wim", "yara", "zane", "ada", "ben", "cara", "dev", "emre", "finn", "gale")
SERVICE_ACCOUNTS = ("build-bot", "backup-agent", "deploy-ci", "metrics", "svc-mailer", "svc-search")
TEAM_GROUPS = ("developers", "ops", "deploy", "analysts", "oncall", "dba")
SYSTEM_USERS = (("root", 0, 0, "/root", "/bin/bash"), ("daemon", 1, 1, "/usr/sbin", "/usr/sbin/nologin"),
                ("bin", 2, 2, "/bin", "/usr/sbin/nologin"), ("sys", 3, 3, "/dev", "/usr/sbin/nologin"),
                ("sync", 4, 65534, "/bin", "/bin/sync"), ("www-data", 33, 33, "/var/www", "/usr/sbin/nologin"),
                ("backup", 34, 34, "/var/backups", "/usr/sbin/nologin"),
                ("nobody", 65534, 65534, "/nonexistent", "/usr/sbin/nologin"))
VALID_SHELLS = ("/bin/sh", "/bin/bash", "/usr/bin/bash", "/bin/zsh", "/usr/bin/zsh", "/bin/dash")
INVALID_SHELLS = ("/usr/sbin/nologin", "/bin/false", "/usr/bin/fish", "/bin/tcsh")


class AccountAudit(TaskFamily):
    """Report the active interactive accounts of one group from passwd/group/shadow/shells/login.defs."""

    name = "account_audit"
    method = (
        ('Parse each file by its colon-separated fields rather than grepping lines (group names and user names '
         "are prefixes of one another, and a name can appear in another group's member list). Read "
         'UID_MIN/UID_MAX from login.defs, ignoring commented-out keys. Build lookup tables (shadow by name, '
         'group by name and by GID, the shells set), then test every passwd entry against each condition, '
         'remembering primary-group membership via the passwd GID and the case where the shadow entry is '
         'missing.', None),
    )
    domains = ("system_administration",)
    verifier_kinds = ("exact_text",)
    fixture_kinds = ("text_only",)
    summary = "join passwd, group, shadow, shells and login.defs to list a group's active login accounts"
    skill_types = ("users_and_packages",)
    skills = ()
    languages = ("bash", "awk", "python")
    command_complexities = ("bash_only", "bash_code")

    def build(self, sig: dict, rng: random.Random) -> TaskSpec:
        lvl = complexity_level(sig)
        uid_min, uid_max = rng.choice(((1000, 60000), (1000, 29999), (500, 60000), (2000, 59999)))
        today = rng.randint(19_500, 20_500)
        n_people = (8, 16, 30, 45)[lvl]
        target = rng.choice(TEAM_GROUPS)
        shells = sorted(rng.sample(VALID_SHELLS, rng.randint(3, 5)))
        unlisted = sorted((set(VALID_SHELLS) - set(shells)) | set(INVALID_SHELLS))

        groups: dict[str, int] = {name: gid for name, gid in (("root", 0), ("daemon", 1), ("bin", 2), ("sys", 3),
                                                              ("www-data", 33), ("backup", 34), ("nogroup", 65534))}
        team_gids = rng.sample(range(uid_min + 5000, uid_min + 9000), len(TEAM_GROUPS) + 1)
        for name, gid in zip([*TEAM_GROUPS, f"{target}-old"], team_gids):
            groups[name] = gid
        members: dict[str, list[str]] = {name: [] for name in groups}

        users = []  # (name, uid, gid, gecos, home, shell)
        for name, uid, gid, home, shell in SYSTEM_USERS:
            users.append((name, uid, gid, "", home, shell))
        people = rng.sample(PEOPLE, n_people)
        uids = rng.sample(range(uid_min, min(uid_max, uid_min + 4000)), n_people)
        shadow_pw: dict[str, str] = {}
        expiry: dict[str, str] = {}
        for person, uid in zip(people, uids):
            # Every person gets a private group (as useradd does) unless they sit in a team group.
            if rng.random() < 0.3:
                gid = groups[rng.choice((target, rng.choice(TEAM_GROUPS)))]
            else:
                gid = uid
                groups[person] = uid
                members[person] = []
            if lvl >= 2 and rng.random() < 0.08:
                gid = rng.randint(uid_min + 9500, uid_min + 9900)  # a group that no longer exists
            roll = rng.random()
            if roll < 0.08:
                uid = rng.randint(max(100, uid_min - 400), uid_min - 1)  # below the human range
            elif roll < 0.12:
                uid = rng.randint(uid_max + 1, uid_max + 3000)  # above it
            shell = rng.choice(shells) if rng.random() < 0.8 else rng.choice(unlisted)
            gecos = f"{person.title()} {rng.choice(('Lopez', 'Okafor', 'Berg', 'Tanaka', 'Novak'))},,,"
            users.append((person, uid, gid, gecos, f"/home/{person}", shell))
            shadow_pw[person] = rng.choice(("$6$", "$6$", "$6$", "$y$", "!$6$", "!", "*", "!!"))
            if lvl == 3 and rng.random() < 0.3:
                expiry[person] = str(today + rng.choice((-300, -1, 0, 1, 200)))
        for svc in rng.sample(SERVICE_ACCOUNTS, 2 + lvl):
            uid = rng.randint(uid_min, uid_max) if rng.random() < 0.5 else rng.randint(uid_max + 1, uid_max + 5000)
            users.append((svc, uid, groups[target] if rng.random() < 0.5 else 65534, "", f"/var/lib/{svc}",
                          rng.choice(shells)))
            shadow_pw[svc] = rng.choice(("*", "!", "$6$"))
        for name, *_ in SYSTEM_USERS:
            shadow_pw[name] = "*" if name != "root" else "$6$"

        for name, *_ in users:
            if name not in people and name not in SERVICE_ACCOUNTS:
                continue
            if rng.random() < 0.35:
                members[target].append(name)
            if rng.random() < 0.25:
                members[f"{target}-old"].append(name)
            if rng.random() < 0.2:
                other = rng.choice([g for g in TEAM_GROUPS if g != target])
                members[other].append(name)
        if lvl >= 2:
            for name in rng.sample([u[0] for u in users if u[0] in people], 2):
                shadow_pw.pop(name)  # no shadow entry at all

        # Make sure the answer is never empty: two people qualify by construction.
        forced = rng.sample(people, 2)
        by_name = {u[0]: u for u in users}
        for name in forced:
            n, uid, gid, gecos, home, _ = by_name[name]
            if not uid_min <= uid <= uid_max:
                uid = rng.randint(uid_min, uid_min + 4000)
            by_name[name] = (n, uid, gid, gecos, home, rng.choice(shells))
            shadow_pw[name] = "$6$"
            expiry.pop(name, None)
            if name not in members[target] and gid != groups[target]:
                members[target].append(name)
        users = [by_name[u[0]] for u in users]
        # Distinct uids keep the required order unambiguous.
        seen_uids: set[int] = set()
        for i, u in enumerate(users):
            uid = u[1]
            while uid in seen_uids:
                uid += 1
            seen_uids.add(uid)
            users[i] = (u[0], uid, *u[2:])

        gid_name = {gid: name for name, gid in groups.items()}
        target_gid = groups[target]
        expected = []
        for name, uid, gid, _gecos, _home, shell in users:
            pw = shadow_pw.get(name)
            active = pw is not None and not pw.startswith(("!", "*"))
            expired = name in expiry and int(expiry[name]) <= today
            if (uid_min <= uid <= uid_max and shell in shells and active and not expired
                    and (gid == target_gid or name in members[target])):
                expected.append((uid, f"{name}:{uid}:{gid_name.get(gid, str(gid))}"))
        expected_lines = [line for _, line in sorted(expected)]

        passwd_lines = [f"{n}:x:{uid}:{gid}:{gecos}:{home}:{shell}" for n, uid, gid, gecos, home, shell in users]
        group_lines = [f"{g}:x:{gid}:{','.join(members.get(g, []))}" for g, gid in
                       sorted(groups.items(), key=lambda kv: kv[1])]
        shadow_lines = []
        for n, *_ in users:
            if n in shadow_pw:
                pw = shadow_pw[n]
                pw = pw + "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789./") for _ in range(20)) \
                    if pw.endswith("$") else pw
                shadow_lines.append(f"{n}:{pw}:{today - rng.randint(1, 900)}:0:99999:7::{expiry.get(n, '')}:")
        rng.shuffle(shadow_lines)
        login_defs = (
            "#\n# /etc/login.defs - configuration control definitions for the login package.\n#\n"
            "MAIL_DIR        /var/mail\nPASS_MAX_DAYS   99999\nPASS_MIN_DAYS   0\n\n"
            "# Min/max values for automatic uid selection in useradd\n#\n"
            f"UID_MIN\t\t\t {uid_min}\nUID_MAX\t\t\t{uid_max}\n"
            "#SYS_UID_MIN\t\t  100\n#SYS_UID_MAX\t\t  999\n"
            f"GID_MIN\t\t\t {uid_min}\nGID_MAX\t\t\t{uid_max}\nUMASK\t\t022\n"
        )
        shells_file = "# /etc/shells: valid login shells\n" + "".join(s + "\n" for s in shells)
        fixtures = {
            "etc/passwd": ("\n".join(passwd_lines) + "\n").encode(),
            "etc/group": ("\n".join(group_lines) + "\n").encode(),
            "etc/shadow": ("\n".join(shadow_lines) + "\n").encode(),
            "etc/shells": shells_file.encode(),
            "etc/login.defs": login_defs.encode(),
        }

        rules = [
            "its UID lies within `UID_MIN`..`UID_MAX` (inclusive) as configured in `/app/etc/login.defs`;",
            "its login shell is listed in `/app/etc/shells`;",
            "its password is not locked: the password field in `/app/etc/shadow` does not start with `!` "
            "or `*`" + (" (an account with no shadow entry counts as locked)" if lvl >= 2 else "") + ";",
        ]
        if lvl == 3:
            rules.append(f"it has not expired: take today as day {today} (days since 1970-01-01); an "
                         "account whose shadow expiry field is set to a day on or before today is expired;")
        rules.append(f"it belongs to the group `{target}`, either as its primary group (the GID in "
                     "`passwd`) or as a listed member in `/app/etc/group`.")
        out = "/app/audit.txt"
        body = (
            "Security asked which accounts can actually log in as members of one team. Our host's "
            "account files are copied under `/app/etc/` (`passwd`, `group`, `shadow`, `shells`, "
            "`login.defs`). List every account in `passwd` such that:\n\n"
            + "\n".join(f"- {r}" for r in rules)
            + "\n\nFor each such account write `<name>:<uid>:<primary group name>` (if the primary GID "
            "has no entry in `group`, write the GID number instead), one per line, sorted by UID."
        )
        instruction = instruction_frame(sig, "Who can log in as a team member?", body,
                                        [f"`{out}`: the matching accounts, one per line, sorted by UID."])
        test_initial = py_source("""
            import os

            __CONSTANTS__

            def test_account_files_present():
                for name, lines in LINE_COUNTS.items():
                    with open(f"/app/etc/{name}") as fh:
                        assert len(fh.read().splitlines()) == lines

            def test_no_report_yet():
                assert not os.path.exists(OUT)
            """, LINE_COUNTS={"passwd": len(passwd_lines), "group": len(group_lines), "shadow": len(shadow_lines)},
            OUT=out)
        test_final = lines_final_test("test_audit_matches", out, expected_lines)
        solve = python_oracle(py_source("""
            __CONSTANTS__

            def entries(name):
                with open(f"/app/etc/{name}") as fh:
                    return [line.rstrip("\\n").split(":") for line in fh
                            if line.strip() and not line.startswith("#")]

            settings = {}
            with open("/app/etc/login.defs") as fh:
                for line in fh:
                    parts = line.split()
                    if len(parts) == 2 and not line.startswith("#"):
                        settings[parts[0]] = parts[1]
            uid_min, uid_max = int(settings["UID_MIN"]), int(settings["UID_MAX"])
            with open("/app/etc/shells") as fh:
                shells = {line.strip() for line in fh if line.strip() and not line.startswith("#")}
            shadow = {f[0]: f for f in entries("shadow")}
            groups = entries("group")
            gid_name = {int(g[2]): g[0] for g in groups}
            target = next(g for g in groups if g[0] == GROUP)
            target_members = set(filter(None, target[3].split(",")))
            rows = []
            for name, _pw, uid, gid, _gecos, _home, shell in entries("passwd"):
                uid, gid = int(uid), int(gid)
                sh = shadow.get(name)
                if not (uid_min <= uid <= uid_max) or shell not in shells:
                    continue
                if sh is None or sh[1].startswith(("!", "*")):
                    continue
                if TODAY is not None and sh[7] and int(sh[7]) <= TODAY:
                    continue
                if gid != int(target[2]) and name not in target_members:
                    continue
                rows.append((uid, f"{name}:{uid}:{gid_name.get(gid, gid)}"))
            with open("/app/audit.txt", "w") as fh:
                fh.writelines(line + "\\n" for _, line in sorted(rows))
            """, GROUP=target, TODAY=today if lvl == 3 else None))
        return TaskSpec(
            instruction=instruction,
            setup_sh=bash_script("mkdir -p /app/etc && cp /tmp/env/fixtures/etc/* /app/etc/"),
            test_initial=test_initial,
            test_final=test_final,
            solve_sh=solve,
            truth={"given": {"group": target, **({"today_day": today} if lvl == 3 else {})},
                   "expected_lines": expected_lines,
                   "uid_range": f"{uid_min}-{uid_max}",
                   "decoy_group": f"{target}-old"},
            verifier_kind="exact_text",
            fixture_kind="text_only",
            fixtures=fixtures,
            output_paths=[out],
        )


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

    name = "permission_policy"
    method = (
        ('Walk the tree listing regular files only (find -type f skips symlinks), compute each path relative '
         'to /app/srv, and test the policy rules in file order, stopping at the first match; glob matching '
         "where * crosses slashes is what bash's [[ $path == $glob ]] and Python's fnmatch do. Watch for rules "
         'that are shadowed by an earlier, broader rule, for dotfiles, and for links (chmod follows them). '
         "Verify with stat -c '%a %n'.", None),
    )
    domains = ("system_administration",)
    verifier_kinds = ("exact_text",)
    fixture_kinds = ("text_only",)
    output_files = False
    summary = "apply an ordered glob-to-mode policy to a service tree with chmod (first match wins)"
    skill_types = ()
    skills = ()
    languages = ("bash", "python")
    command_complexities = ("bash_only", "bash_code")

    def build(self, sig: dict, rng: random.Random) -> TaskSpec:
        lvl = complexity_level(sig)
        dirs = sorted(SRV_LAYOUT)
        n_dirs = (4, 6, 8, len(dirs))[lvl]
        chosen_dirs = sorted(rng.sample(dirs, n_dirs))
        files: list[str] = []
        for d in chosen_dirs:
            names = SRV_LAYOUT[d]
            for name in rng.sample(names, max(2, len(names) - rng.randint(0, 1))):
                files.append(name if d == "." else f"{d}/{name}")
        files.sort()
        rules = [(pat, rng.choice(modes)) for pat, modes in rng.sample(RULE_TEMPLATES, (6, 8, 10, 12)[lvl])]
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
        test_initial = py_source("""
            import os
            import stat

            __CONSTANTS__

            def test_tree_in_initial_state():
                for rel, mode in INITIAL.items():
                    st = os.lstat(f"/app/srv/{rel}")
                    assert stat.S_ISREG(st.st_mode), rel
                    assert stat.S_IMODE(st.st_mode) == mode, rel
                for rel, target in LINKS.items():
                    assert os.readlink(f"/app/srv/{rel}") == target
            """, INITIAL=initial, LINKS=links)
        test_final = py_source("""
            import os
            import stat

            __CONSTANTS__

            def test_links_untouched():
                for rel, target in LINKS.items():
                    assert os.path.islink(f"/app/srv/{rel}"), f"{rel} is no longer a symlink"
                    assert os.readlink(f"/app/srv/{rel}") == target

            def test_modes_follow_policy():
                wrong = []
                for rel, mode in EXPECTED.items():
                    st = os.lstat(f"/app/srv/{rel}")
                    assert stat.S_ISREG(st.st_mode), f"{rel} is not a regular file any more"
                    if stat.S_IMODE(st.st_mode) != mode:
                        wrong.append(f"{rel}: {stat.S_IMODE(st.st_mode):04o} (expected {mode:04o})")
                assert not wrong, "wrong modes: " + "; ".join(wrong)

            def test_directories_untouched():
                wrong = [f"{d}: {stat.S_IMODE(os.lstat('/app/srv/' + d).st_mode):04o} (expected {mode:04o})"
                         for d, mode in DIR_MODES.items()
                         if stat.S_IMODE(os.lstat('/app/srv/' + d).st_mode) != mode]
                assert not wrong, "directory modes changed: " + "; ".join(wrong)

            def test_nothing_added_or_removed():
                found = set()
                for root, dirs, names in os.walk("/app/srv"):
                    for name in names:
                        found.add(os.path.relpath(os.path.join(root, name), "/app/srv"))
                assert found == set(EXPECTED) | set(LINKS)
            """, EXPECTED=expected, LINKS=links, DIR_MODES=dir_modes)
        solve = python_oracle(py_source("""
            import fnmatch
            import os

            rules = []
            with open("/app/perms.policy") as fh:
                for line in fh:
                    line = line.split("#", 1)[0].strip()
                    if line:
                        pattern, mode = line.split()
                        rules.append((pattern, int(mode, 8)))
            for root, dirs, names in os.walk("/app/srv"):
                for name in names:
                    path = os.path.join(root, name)
                    if os.path.islink(path) or not os.path.isfile(path):
                        continue
                    rel = os.path.relpath(path, "/app/srv")
                    for pattern, mode in rules:
                        if fnmatch.fnmatchcase(rel, pattern):
                            os.chmod(path, mode)
                            break
            """))
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


FAMILIES = [AccountAudit, PermissionPolicy]
