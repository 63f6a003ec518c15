"""The next version of every package of a monorepo, planned from its conventional commits."""

from __future__ import annotations

import random
from datetime import datetime, timedelta

from termforge.errors import TermforgeError
from termforge.generate.base import (DifficultyKnobs, FamilyAxes, TaskFamily, TaskSpec, bash_script, complexity_level,
                                     instruction_frame)
from termforge.generate.families.sources import lines_final_test, packaged_source, python_oracle


RELEASE_PACKAGES = ("core", "util", "http", "cli", "config", "auth", "storage", "metrics", "schema", "cache",
                    "queue", "events", "render", "codec", "parser", "sdk", "plugins", "telemetry")
THIRD_PARTY = ("serde", "tokio", "regex", "requests", "click", "pyyaml", "anyio", "rich", "attrs", "lxml")
OTHER_SCOPES = ("ci", "deps", "repo", "release", "lint")
QUIET_TYPES = ("chore", "docs", "test", "refactor", "ci", "style", "build")
CHANGE_VERBS = ("add", "support", "handle", "drop", "rework", "speed up", "validate", "expose", "cache", "log")
CHANGE_OBJECTS = ("empty input", "timeouts", "unicode names", "the retry budget", "config reload", "batch sizes",
                  "trailing slashes", "large payloads", "nested keys", "stale entries", "concurrent writers",
                  "error messages", "legacy flags", "the lock file", "default ports", "schema versions")
COMMIT_AUTHORS = (("Ana Souza", "ana"), ("Wei Chen", "wei"), ("Priya Nair", "priya"), ("Tom Becker", "tom"),
                  ("Lena Fischer", "lena"), ("Omar Haddad", "omar"))
BUMPING = {"feat": 2, "fix": 1, "perf": 1}  # change levels: 1 patch, 2 minor, 3 major (breaking)


def next_version(version: str, change: int) -> str:
    """The version after a change of the given level, by the rules the instruction states."""
    core, _, pre = version.partition("-")
    parts = [int(x) for x in core.split(".")]
    part = change - 1 if parts[0] == 0 and change > 1 else change  # 0.x: one part further right
    i = 3 - part
    bumped = ".".join(map(str, parts[:i] + [parts[i] + 1] + [0] * (2 - i)))
    if not pre:
        return bumped
    ident, n = pre.rsplit(".", 1)
    covered = 3 if parts[1] == parts[2] == 0 else 2 if parts[2] == 0 else 1
    return f"{core}-{ident}.{int(n) + 1}" if part <= covered else f"{bumped}-{ident}.0"


def release_plan(packages: dict[str, dict], commits: list[dict]) -> tuple[list[str], dict, dict]:
    """(plan lines, own change level, final change level) for packages {name: {version, deps}} and
    commits oldest first."""
    cancelled: set[str] = set()
    for c in reversed(commits):  # newest first: a revert is settled before the commit it names
        if c["sha"] not in cancelled and c.get("reverts"):
            cancelled.add(c["reverts"])
    own = dict.fromkeys(packages, 0)
    for c in commits:
        if c["sha"] in cancelled or not c.get("type"):
            continue
        level = 3 if c["breaking"] else BUMPING.get(c["type"], 0)
        for scope in c["scopes"]:
            if scope in own:
                own[scope] = max(own[scope], level)
    depth: dict[str, int] = {}

    def build_level(name: str) -> int:
        if name not in depth:
            depth[name] = 1 + max(map(build_level, packages[name]["deps"]), default=-1)
        return depth[name]
    order = sorted(packages, key=lambda n: (build_level(n), n))
    change: dict[str, int] = {}
    for name in order:  # dependencies are settled before their dependents
        change[name] = max(own[name], 1 if any(change[d] for d in packages[name]["deps"]) else 0)
    lines = [f"{n} {packages[n]['version']} -> {next_version(packages[n]['version'], change[n])}"
             for n in order if change[n]]
    return lines, own, change


def _prerelease(rng: random.Random, x: int) -> str:
    """A pre-release version of a major, minor or patch line (x: the major part)."""
    y, z = rng.randint(1, 9), rng.randint(1, 9)
    core = rng.choice(([f"{x}.0.0"] if x else []) + [f"{x}.{y}.0", f"{x}.{y}.{z}"])
    return f"{core}-{rng.choice(('alpha', 'beta', 'rc'))}.{rng.randint(0, 4)}"


def _git_log(commits: list[dict]) -> str:
    """`git log` default output, newest first; message lines indented by four spaces."""
    out = []
    for c in reversed(commits):
        name, user = c["author"]
        out.append(f"commit {c['sha']}")
        if c.get("merge"):
            out.append("Merge: " + " ".join(p[:7] for p in c["merge"]))
        out += [f"Author: {name} <{user}@example.org>",
                f"Date:   {c['date']:%a %b} {c['date'].day} {c['date']:%H:%M:%S %Y} +0000", ""]
        out += [f"    {ln}" if ln else "" for ln in [c["subject"], *c["body"]]]
        out.append("")
    return "\n".join(out)


class MonorepoReleasePlan(TaskFamily):
    """Derive each package's next semantic version from conventional commits and internal dependencies."""

    knobs = DifficultyKnobs(packages=(4, 6, 8, 11), quiet_types=(2, 4, 7, 7), commits=(8, 14, 24, 36),
                            merges=(0, 0, 2, 3), reverts=(0, 0, 1, 3))
    axes = FamilyAxes(name="monorepo_release_plan", domains=("software_engineering",), verifier_kinds=("exact_text",),
                      fixture_kinds=("text_only",), skill_types=("interfaces_and_packaging",),
                      skills=("choose a semantic version bump from a changelog",), languages=("python", "bash"),
                      command_complexities=("bash_code",),
                      summary="plan a monorepo release: semver bumps from conventional commits, reverts and "
                              "dependency propagation")
    method = (
        ("Read every package.toml with a TOML parser and keep the name, the version and the [dependencies] keys "
         "that name workspace packages.", None),
        ("Split the log into commits at the `commit <sha>` header lines and strip the four-space indent from "
         "the message.", None),
        ("Walk the commits newest first so that a revert is settled before the commit it names, and skip "
         "cancelled ones.", r"This reverts commit"),
        ("Take each package's own change from the scopes of conventional subjects and from breaking-change "
         "footers.", r"BREAKING CHANGE:"),
        ("Take each package's own change from the scopes of conventional subjects.",
         lambda v: not v.states(r"BREAKING CHANGE:")),
        ("Then visit packages in build-level order so a dependency is final before its dependents inherit a "
         "patch change.", r"build level"),
        ("Do the version arithmetic last and try it by hand on a 0.x and a pre-release version before trusting "
         "it.", r"A pre-release version `X"),
        ("Do the version arithmetic last and try it by hand on a 0.x version before trusting it.",
         lambda v: v.states(r"For `0\.Y\.Z` versions") and not v.states(r"A pre-release version `X")),
        ("Do the version arithmetic last and try it by hand on a major change before trusting it.",
         lambda v: not v.states(r"For `0\.Y\.Z` versions")),
    )


    def _draft(self, rng: random.Random, lvl: int):
        knobs = self.knobs.at(lvl)
        names = rng.sample(RELEASE_PACKAGES, knobs.packages)
        packages = {}
        for i, name in enumerate(names):  # only on packages drawn earlier: the graph stays acyclic
            k = 0 if lvl == 0 else min(i, rng.choice((0, 1, 1, 2, 2, 3)))
            x = 0 if lvl >= 2 and rng.random() < 0.3 else rng.randint(1, 4)
            version = (_prerelease(rng, x) if lvl == 3 and rng.random() < 0.3
                       else f"{x}.{rng.randint(1 if x == 0 else 0, 12)}.{rng.randint(0, 9)}")
            packages[name] = {"version": version, "deps": sorted(rng.sample(names[:i], k))}
        active = rng.sample(names, max(2, len(names) * 3 // 5))  # the rest change only through dependencies
        types = ["feat", "fix"] + (["perf"] if lvl else []) + list(QUIET_TYPES[: knobs.quiet_types])
        weights = [3, 4] + ([1] if lvl else []) + [2] * (len(types) - 2 - (1 if lvl else 0))
        start = datetime(rng.randint(2022, 2025), rng.randint(1, 12), rng.randint(1, 28), 9)
        commits, subjects = [], set()
        for _ in range(knobs.commits):
            kind = rng.choices(types, weights)[0]
            roll = rng.random()
            if lvl >= 1 and roll < 0.12:
                scopes = rng.choice(([],) + tuple([s] for s in OTHER_SCOPES))
            elif lvl >= 2 and roll < 0.27:
                scopes = sorted(rng.sample(active, 2))
            else:  # quiet commits may touch any package, bumping ones only the active ones
                scopes = [rng.choice(active if kind in BUMPING else names)]
            breaking = "" if rng.random() > 0.12 else rng.choice(("!",) + (("footer", "footer") if lvl else ()))
            while True:
                desc = f"{rng.choice(CHANGE_VERBS)} {rng.choice(CHANGE_OBJECTS)}"
                subject = f"{kind}{'(' + ','.join(scopes) + ')' if scopes else ''}{'!' * (breaking == '!')}: {desc}"
                if subject not in subjects:
                    break
            subjects.add(subject)
            body = []
            if lvl >= 1 and rng.random() < 0.5:
                body += ["", rng.choice((f"Callers that relied on the old {desc.split()[-1]} behaviour should "
                                         "check their settings.", "No breaking change for existing callers.",
                                         "Found while reviewing the nightly build."))]
            if breaking == "footer":
                body += ["", f"{'BREAKING-CHANGE' if lvl >= 2 and rng.random() < 0.5 else 'BREAKING CHANGE'}: "
                             f"{rng.choice(CHANGE_OBJECTS)} are no longer accepted"]
            if lvl >= 1 and rng.random() < 0.2:
                body += ["", f"Refs: #{rng.randint(100, 999)}"]
            commits.append({"type": kind, "scopes": scopes, "breaking": bool(breaking), "subject": subject,
                            "body": body})
        for _ in range(knobs.merges):  # merge commits: no conventional subject
            commits.insert(rng.randint(1, len(commits)), {"subject": f"Merge pull request #{rng.randint(100, 999)} "
                           f"from {rng.choice(COMMIT_AUTHORS)[1]}/topic", "body": [], "merge": True})
        for c in commits:
            c["sha"] = f"{rng.getrandbits(160):040x}"
        reverted: list[dict] = []
        for k in range(knobs.reverts):
            if k == 2:  # a revert of a revert: the first reverted commit counts again
                targets = [c for c in commits if c.get("reverts") == reverted[0]["sha"]]
            else:
                targets = [c for c in commits if (c.get("type") in BUMPING or c.get("breaking"))
                           and c not in reverted]
            target = rng.choice(targets)
            reverted.append(target)
            revert = {"subject": f'Revert "{target["subject"]}"', "body": ["", f"This reverts commit {target['sha']}."],
                      "reverts": target["sha"], "sha": f"{rng.getrandbits(160):040x}"}
            commits.insert(rng.randint(commits.index(target) + 1, len(commits)), revert)
        when = start
        for c in commits:
            when += timedelta(seconds=rng.randint(400, 36000))
            c["date"], c["author"] = when, rng.choice(COMMIT_AUTHORS)
            if c.get("merge"):
                c["merge"] = [f"{rng.getrandbits(28):07x}", f"{rng.getrandbits(28):07x}"]
        lines, own, change = release_plan(packages, commits)
        wanted = [2 <= len(lines) < len(names)]
        if lvl >= 1:  # some package changes only because a dependency does
            wanted.append(any(change[n] and not own[n] for n in names))
        if lvl >= 2:  # the reverts and the 0.x rule change the answer
            wanted.append(lines != release_plan(packages, [{**c, "reverts": None} for c in commits])[0])
            wanted.append(any(packages[n]["version"].startswith("0.") and change[n] for n in names))
        if lvl == 3:
            wanted.append(any("-" in packages[n]["version"] and change[n] for n in names))
        return (packages, commits, lines) if all(wanted) else None

    def build(self, sig: dict, rng: random.Random) -> TaskSpec:
        lvl = complexity_level(sig)
        for _ in range(200):
            draft = self._draft(rng, lvl)
            if draft:
                break
        else:
            raise TermforgeError(f"{self.name}: no draw met the level-{lvl} conditions")
        packages, commits, expected = draft
        renamed = rng.sample(sorted(packages), 2) if lvl == 3 else []  # directory name differs from package name
        dirs = {n: (f"{rng.choice(('lib', 'pkg'))}-{n}" if n in renamed else n) for n in packages}
        fixtures = {"repo/commits.log": _git_log(commits).encode()}
        for name, pkg in packages.items():
            deps = {d: f'{{ path = "../{dirs[d]}" }}' for d in pkg["deps"]}
            for ext in rng.sample(THIRD_PARTY, rng.randint(0, 2)):
                deps[ext] = f'"{rng.randint(0, 3)}.{rng.randint(0, 20)}"'
            text = (f'[package]\nname = "{name}"\nversion = "{pkg["version"]}"\n'
                    f'description = "The {name} package."\n\n[dependencies]\n'
                    + "".join(f"{k} = {v}\n" for k, v in sorted(deps.items())))
            others = [n for n in packages if n != name and n not in pkg["deps"]]
            if lvl >= 2 and others and rng.random() < 0.4:  # test-only dependencies never propagate
                dev = rng.choice(others)
                text += f'\n[dev-dependencies]\n{dev} = {{ path = "../{dirs[dev]}" }}\n'
            fixtures[f"repo/packages/{dirs[name]}/package.toml"] = text.encode()
        out = "/app/release_plan.txt"
        rules = [
            "The first line of a commit message (its subject) has the form `<type>(<scopes>)<!>: <description>`, "
            "where `(<scopes>)` and `!` are optional and `<scopes>` is a comma-separated list of package names "
            "(the `name` in `package.toml`"
            + (", which need not match the directory" if lvl == 3 else "") + "). A commit touches the packages "
            "its scopes name; a commit without scopes, or whose scopes name no package (such as `ci`), touches none.",
            "A commit is breaking when its subject has the `!` before the colon"
            + (", or when a line of its message starts with `BREAKING CHANGE:` or `BREAKING-CHANGE:`" if lvl else "")
            + ". A breaking commit is a major change, whatever its type; otherwise `feat` is a minor change, `fix`"
            + (" and `perf` are" if lvl else " is") + " a patch change, and every other type is no change. "
            "A package's own change is the highest change among the commits that touch it.",
        ]
        if lvl >= 2:
            rules.append("Merge commits and subjects not of that form touch nothing. A commit whose subject starts "
                         "with `Revert \"` and whose message has the line `This reverts commit <sha>.` cancels the "
                         "commit with that sha and changes nothing itself. A cancelled commit counts for nothing; "
                         "when it is itself a revert, it cancels nothing.")
        if lvl >= 1:
            rules.append("The internal dependencies of a package are the entries under its `[dependencies]` whose "
                         "key is the name of a package in the repository (the others are third-party)"
                         + ("; `[dev-dependencies]` never count" if lvl >= 2 else "") + ". A package whose "
                         "internal dependency gets a new version gets at least a patch change itself, so changes "
                         "propagate to dependents of dependents.")
        rules.append("A major, minor or patch change increments the major, minor or patch part of `X.Y.Z` and "
                     "resets the parts to its right to 0."
                     + (" For `0.Y.Z` versions everything moves one part to the right: a major change increments "
                        "the minor part, and minor and patch changes increment the patch part." if lvl >= 2 else ""))
        if lvl == 3:
            rules.append("A pre-release version `X.Y.Z-<id>.<n>` prepares release `X.Y.Z`, which already increments "
                         "the major part if `Y` and `Z` are 0, the minor part if only `Z` is 0, and the patch part "
                         "otherwise. If the part the change increments is that part or one to its right, only `n` "
                         "goes up by one (`1.4.0-beta.2` with a patch change gives `1.4.0-beta.3`); otherwise the "
                         "part of `X.Y.Z` is incremented as above and the version restarts at `-<id>.0` "
                         "(`1.4.0-beta.2` with a major change gives `2.0.0-beta.0`).")
        order = ("Sort the lines by build level, then by package name (byte order). A package without internal "
                 "dependencies has build level 0; any other package has one more than the highest build level "
                 "among its internal dependencies." if lvl else "Sort the lines by package name (byte order).")
        body = (
            "We are cutting the next release of the monorepo in `/app/repo`. Every package lives in "
            "`/app/repo/packages/<dir>/package.toml`, whose `[package]` table gives its `name` and its current "
            "`version` (the last release). `/app/repo/commits.log` is the `git log` output (newest first) of every "
            "commit since that release. Work out which packages get a new version, and what it is, under "
            "these rules:\n\n"
            + "\n".join(f"- {r}" for r in rules)
            + f"\n\nWrite `{out}` with one line `<name> <current> -> <new>` (single spaces) for each package that "
            f"gets a new version and none for the others. {order}"
        )
        deliverable = f"`{out}`: one line per package that gets a new version, sorted as described."
        instruction = instruction_frame(sig, "Plan the next monorepo release", body, [deliverable])
        test_initial = packaged_source(__name__, "test_initial_state.py.txt", DIRS=sorted(dirs.values()), OUT=out)
        test_final = lines_final_test("test_release_plan_matches", out, expected)
        solve = python_oracle(packaged_source(__name__, "oracle.py.txt", OUT=out))
        return TaskSpec(
            instruction=instruction,
            setup_sh=bash_script("mkdir -p /app/repo && cp -r /tmp/env/fixtures/repo/. /app/repo/"),
            test_initial=test_initial,
            test_final=test_final,
            solve_sh=solve,
            truth={"given": {"packages": len(packages), "commits": len(commits)}, "expected_lines": expected},
            verifier_kind="exact_text",
            fixture_kind="text_only",
            fixtures=fixtures,
            output_paths=[out],
        )




FAMILY = MonorepoReleasePlan
