"""The active login accounts of a group, from passwd-style files, shells and login.defs."""

from __future__ import annotations

import random

from termforge.generate.base import (DifficultyKnobs, FamilyAxes, TaskFamily, TaskSpec, bash_script, complexity_level,
                                     instruction_frame)
from termforge.generate.families.sources import lines_final_test, packaged_source, python_oracle


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

    knobs = DifficultyKnobs(people=(8, 16, 30, 45), service_accounts=(2, 3, 4, 5))
    axes = FamilyAxes(name="account_audit", domains=("system_administration",), verifier_kinds=("exact_text",),
                      fixture_kinds=("text_only",), skill_types=("users_and_packages",), skills=(),
                      languages=("bash", "awk", "python"), command_complexities=("bash_only", "bash_code"),
                      summary="join passwd, group, shadow, shells and login.defs to list a group's active login "
                              "accounts")
    method = (
        ('Parse each file by its colon-separated fields rather than grepping lines (group names and user names '
         "are prefixes of one another, and a name can appear in another group's member list). Read "
         'UID_MIN/UID_MAX from login.defs, ignoring commented-out keys. Build lookup tables (shadow by name, '
         'group by name and by GID, the shells set), then test every passwd entry against each condition, '
         'remembering primary-group membership via the passwd GID and the case where the shadow entry is '
         'missing.', None),
    )


    def build(self, sig: dict, rng: random.Random) -> TaskSpec:
        lvl = complexity_level(sig)
        knobs = self.knobs.at(lvl)
        uid_min, uid_max = rng.choice(((1000, 60000), (1000, 29999), (500, 60000), (2000, 59999)))
        today = rng.randint(19_500, 20_500)
        n_people = knobs.people
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
        for svc in rng.sample(SERVICE_ACCOUNTS, knobs.service_accounts):
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
        line_counts = {"passwd": len(passwd_lines), "group": len(group_lines), "shadow": len(shadow_lines)}
        test_initial = packaged_source(__name__, "test_initial_state.py.txt", LINE_COUNTS=line_counts, OUT=out)
        test_final = lines_final_test("test_audit_matches", out, expected_lines)
        solve = python_oracle(packaged_source(__name__, "oracle.py.txt", GROUP=target,
                                              TODAY=today if lvl == 3 else None))
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


FAMILY = AccountAudit
