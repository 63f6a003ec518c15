"""Successful SSH logins that follow a burst of failures, found in rotated sshd auth logs."""

from __future__ import annotations

import gzip
import random
from datetime import datetime, timedelta

from termforge.generate.base import (DifficultyKnobs, FamilyAxes, TaskFamily, TaskSpec, bash_script, complexity_level,
                                     instruction_frame)
from termforge.generate.families.sources import lines_final_test, packaged_source, python_oracle


MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
SSH_HOSTS = ("bastion", "web-01", "edge-gw", "build-02", "db-proxy", "vpn-01")
LOCAL_USERS = {"root": 0, "deploy": 1001, "git": 1002, "backup": 1003, "ops": 1004, "jenkins": 1005}
GUESSED_USERS = ("admin", "test", "oracle", "ubuntu", "pi", "guest", "support", "ftpuser", "postgres", "user")
SUDO_COMMANDS = ("/usr/bin/systemctl restart nginx", "/usr/bin/apt-get update", "/usr/bin/journalctl -u sshd",
                 "/usr/sbin/nft list ruleset")


class _AuthLog:
    """A host's sshd/PAM/cron log being written. Each record is (time, seq, text, fact); fact is
    ("fail", address, attempts) or ("ok", address, user) for the lines the answer depends on."""

    def __init__(self, rng: random.Random, host: str, lvl: int):
        self.rng, self.host, self.lvl, self.records = rng, host, lvl, []

    def add(self, t: datetime, program: str, msg: str, fact: tuple | None = None, pid: int | None = None):
        pid = pid or self.rng.randint(300, 65000)
        stamp = f"{MONTHS[t.month - 1]} {t.day:>2} {t:%H:%M:%S}"
        tag = program if program == "sudo" else f"{program}[{pid}]"
        self.records.append((t, len(self.records), f"{stamp} {self.host} {tag}: {msg}", fact))

    def failures(self, ip: str, times: list[datetime], target: str) -> None:
        """Failed password attempts at `times`, grouped into connections (a new one after a pause)."""
        conns: list[list[datetime]] = []
        for t in sorted(times):
            if conns and (t - conns[-1][-1]).total_seconds() <= 60 and len(conns[-1]) < 6:
                conns[-1].append(t)
            else:
                conns.append([t])
        for conn in conns:
            pid, port = self.rng.randint(1000, 65000), self.rng.randint(32768, 60999)
            user = target if self.rng.random() < 0.5 else self.rng.choice(GUESSED_USERS)
            who = user if user in LOCAL_USERS else f"invalid user {user}"
            method = "keyboard-interactive/pam" if self.lvl >= 2 and self.rng.random() < 0.3 else "password"
            failed = f"Failed {method} for {who} from {ip} port {port} ssh2"
            if user not in LOCAL_USERS and self.lvl >= 1:
                self.add(conn[0], "sshd", f"Invalid user {user} from {ip} port {port}", pid=pid)
            if self.lvl >= 1:  # PAM's own failure line names the address too: it must not be counted
                rhost = f"rhost={ip}" + (f"  user={user}" if user in LOCAL_USERS else "")
                self.add(conn[0], "sshd", "pam_unix(sshd:auth): authentication failure; logname= uid=0 euid=0 "
                         f"tty=ssh ruser= {rhost}", pid=pid)
            if self.lvl >= 2 and len(conn) >= 3 and self.rng.random() < 0.5:
                # rsyslog folds identical consecutive messages: one line stands for len-1 attempts.
                self.add(conn[0], "sshd", failed, ("fail", ip, 1), pid)
                self.add(conn[-1], "sshd", f"message repeated {len(conn) - 1} times: [ {failed}]",
                         ("fail", ip, len(conn) - 1), pid)
            else:
                for t in conn:
                    self.add(t, "sshd", failed, ("fail", ip, 1), pid)
            end = conn[-1] + timedelta(seconds=self.rng.randint(0, 3))
            if len(conn) > 1 and self.lvl >= 1:
                self.add(end, "sshd", f"PAM {len(conn) - 1} more authentication failures; logname= uid=0 euid=0 "
                         f"tty=ssh ruser= rhost={ip}", pid=pid)
            state = "authenticating user" if user in LOCAL_USERS else "invalid user"
            self.add(end, "sshd", f"Connection closed by {state} {user} {ip} port {port} [preauth]", pid=pid)

    def login(self, t: datetime, ip: str, user: str, method: str = "password") -> None:
        pid, port = self.rng.randint(1000, 65000), self.rng.randint(32768, 60999)
        key = f": ED25519 SHA256:{self.rng.randbytes(12).hex()}" if method == "publickey" else ""
        self.add(t, "sshd", f"Accepted {method} for {user} from {ip} port {port} ssh2{key}", ("ok", ip, user), pid)
        self.add(t, "sshd", f"pam_unix(sshd:session): session opened for user {user}(uid={LOCAL_USERS[user]}) "
                 "by (uid=0)", pid=pid)
        self.add(t, "systemd-logind", f"New session {self.rng.randint(2, 900)} of user {user}.")
        self.add(t + timedelta(minutes=self.rng.randint(1, 90)), "sshd",
                 f"pam_unix(sshd:session): session closed for user {user}", pid=pid)


def _burst(rng: random.Random, end: datetime, n: int, max_gap: int) -> list[datetime]:
    """n attempt times, the last at `end`, each 2..max_gap seconds after the one before."""
    times = [end]
    for _ in range(n - 1):
        times.append(times[-1] - timedelta(seconds=rng.randint(2, max(2, max_gap))))
    return sorted(times)


def bruteforce_findings(records: list[tuple], window_min: int, threshold: int) -> list[str]:
    """The answer key, from the facts behind the lines (the oracle reads the text instead)."""
    fails: dict[str, list[datetime]] = {}
    for t, _, _, fact in records:
        if fact and fact[0] == "fail":
            fails.setdefault(fact[1], []).extend([t] * fact[2])
    found = []
    for t, _, _, fact in records:
        if fact and fact[0] == "ok":
            counted = [f for f in fails.get(fact[1], []) if t - timedelta(minutes=window_min) <= f <= t]
            if len(counted) >= threshold:
                found.append((t, fact[1], fact[2], f"{fact[1]} {fact[2]} {min(counted):%Y-%m-%dT%H:%M:%S} "
                                                   f"{t:%Y-%m-%dT%H:%M:%S} {len(counted)}"))
    return [line for *_, line in sorted(found)]


class SshBruteForceLogins(TaskFamily):
    """Find the sshd logins that followed a burst of failed passwords from the same address."""

    knobs = DifficultyKnobs(
        log_hours=(20, 40, 80, 120), attacker_networks=(3, 2, 2, 2), break_ins=((2, 3), (2, 3), (3, 4), (3, 5)),
        legit_logins=(3, 6, 12, 20), scanners=(1, 2, 5, 8), cron_sessions=(6, 12, 40, 80), log_files=(2, 3, 4, 5))
    axes = FamilyAxes(name="ssh_bruteforce_logins", domains=("security",), verifier_kinds=("exact_text",),
                      fixture_kinds=("text_only",), skill_types=("log_forensics",),
                      skills=("spot bursts of failed logins from one source",
                              "rebuild an attack timeline from authentication logs"),
                      languages=("python", "bash", "awk"), anchors=("OpenSSH",),
                      command_complexities=("bash_code", "bash_only"),
                      summary="find successful SSH logins preceded by a burst of failures from one address in "
                              "rotated auth logs")
    method = (
        ('Read the rotated files oldest first (highest number first, decompressing .gz ones), give every line '
         'a full date by carrying the year forward and bumping it when the month goes backwards, and keep only '
         'sshd lines. Match the Failed and Accepted messages by their structure and take the address after '
         '`from`, not any IP-looking text: PAM lines repeat the address as rhost=, and substring matching '
         "confuses addresses that share a prefix. Expand rsyslog's `message repeated K times` into K attempts. "
         "For each Accepted line count that address's failures inside the inclusive window ending at the "
         'login, and test the edges (an attempt exactly on the boundary, one a second outside).', None),
    )


    def build(self, sig: dict, rng: random.Random) -> TaskSpec:
        lvl = complexity_level(sig)
        knobs = self.knobs.at(lvl)
        window, threshold = rng.choice((5, 10, 15, 30)), rng.randint(3, 6)
        year = rng.randint(2021, 2025)
        hours = knobs.log_hours
        if lvl == 3:  # the rotation spans New Year: the year has to be carried over
            start = datetime(year, 12, rng.randint(28, 29), rng.randint(0, 23))
        else:
            start = datetime(year, rng.randint(1, 12), rng.randint(1, 28), rng.randint(0, 23))
        log = _AuthLog(rng, rng.choice(SSH_HOSTS), lvl)
        nets = ("203.0.113", "198.51.100", "192.0.2")[: knobs.attacker_networks]  # fewer nets: more prefix look-alikes
        used: set[str] = set()

        def attacker() -> str:
            while True:
                if lvl >= 2 and rng.random() < 0.3:
                    ip = f"2001:db8:{rng.randint(1, 0xffff):x}::{rng.randint(1, 0xffff):x}"
                else:
                    ip = f"{rng.choice(nets)}.{rng.randint(1, 254)}"
                if ip not in used:
                    used.add(ip)
                    return ip

        def when() -> datetime:
            return start + timedelta(seconds=rng.randint(3600, hours * 3600))

        span = window * 60
        tight = max(3, (span - 120) // (threshold + 4))  # gap that keeps a whole burst inside the window

        def target() -> str:  # the account an attack aims at (a real one, so the login can succeed)
            return rng.choice(list(LOCAL_USERS))

        n_legit, n_scan, n_cron = knobs.legit_logins, knobs.scanners, knobs.cron_sessions
        n_pos = rng.randint(*knobs.break_ins)
        for k in range(n_pos):
            ip, user, t = attacker(), target(), when()
            if lvl == 3 and k == 0:  # one finding after New Year, where a year not carried over shows
                t = datetime(year + 1, 1, 1, 1) + timedelta(seconds=rng.randint(0, 19 * 3600))
            log.failures(ip, _burst(rng, t - timedelta(seconds=rng.randint(5, 60)),
                                    threshold + rng.randint(0, 4), tight), user)
            log.login(t, ip, user)
            if lvl == 3 and rng.random() < 0.5:  # the attacker comes back: a second finding
                log.login(t + timedelta(seconds=rng.randint(20, 90)), ip, user)
        for _ in range(1 + (lvl == 3)):  # one attempt short of the threshold
            ip, user, t = attacker(), target(), when()
            log.failures(ip, _burst(rng, t - timedelta(seconds=rng.randint(5, 60)), threshold - 1, tight), user)
            log.login(t, ip, user)
        if lvl >= 1:
            # Failures from one address, the login from another; and a login hours after the burst.
            a, b, user, t = attacker(), attacker(), target(), when()
            log.failures(a, _burst(rng, t - timedelta(seconds=30), threshold + 2, tight), user)
            log.login(t, b, user)
            ip, user, t = attacker(), target(), when()
            log.failures(ip, _burst(rng, t - timedelta(hours=rng.randint(2, 6)), threshold + 3, tight), user)
            log.login(t, ip, user)
        if lvl >= 2:
            # The burst's first attempt lies just outside the window; and a burst longer than the window.
            ip, user, t = attacker(), target(), when()
            early = t - timedelta(seconds=span + rng.randint(1, 30))
            log.failures(ip, [early] + _burst(rng, t - timedelta(seconds=10), threshold - 1, tight), user)
            log.login(t, ip, user)
            ip, user, t = attacker(), target(), when()
            n = 2 * threshold + 2
            log.failures(ip, _burst(rng, t - timedelta(seconds=8), n, int(1.6 * span / n)), user)
            log.login(t, ip, user)
        if lvl == 3:  # the first attempt exactly on the window's edge: counted (both ends included)
            ip, user, t = attacker(), target(), when()
            log.failures(ip, [t - timedelta(seconds=span)] + _burst(rng, t - timedelta(seconds=12),
                                                                    threshold - 1, tight), user)
            log.login(t, ip, user)
        for _ in range(n_scan):
            log.failures(attacker(), _burst(rng, when(), rng.randint(threshold, 4 * threshold), 20),
                         rng.choice(GUESSED_USERS))
        offices = [f"10.20.{rng.randint(0, 9)}.{rng.randint(2, 250)}" for _ in range(3)]
        for _ in range(n_legit):
            ip, user, t = rng.choice(offices), target(), when()
            if rng.random() < 0.3:  # a typo first: one failure is no attack
                log.failures(ip, [t - timedelta(seconds=rng.randint(3, 8))], user)
                log.login(t, ip, user)
            else:
                log.login(t, ip, user, "publickey")
            if rng.random() < 0.5:
                log.add(t + timedelta(seconds=rng.randint(20, 600)), "sudo",
                        f"  {user} : TTY=pts/{rng.randint(0, 4)} ; PWD=/home/{user} ; USER=root ; "
                        f"COMMAND={rng.choice(SUDO_COMMANDS)}")
        for _ in range(n_cron):
            t, pid = when(), rng.randint(300, 65000)
            log.add(t, "CRON", "pam_unix(cron:session): session opened for user root(uid=0) by (uid=0)", pid=pid)
            log.add(t + timedelta(seconds=rng.randint(0, 2)), "CRON",
                    "pam_unix(cron:session): session closed for user root", pid=pid)

        records = sorted(log.records)
        expected = bruteforce_findings(records, window, threshold)
        n_files = knobs.log_files
        # Rotation by size, roughly: near-equal files, a little uneven.
        step = len(records) // n_files
        cuts = [k * step + rng.randint(-step // 4, step // 4) for k in range(1, n_files)]
        chunks = [records[a:b] for a, b in zip([0, *cuts], [*cuts, len(records)])]
        fixtures: dict[str, bytes] = {}
        for age, chunk in enumerate(reversed(chunks)):  # auth.log is the newest
            data = "".join(text + "\n" for _, _, text, _ in chunk).encode()
            name = "auth.log" + (f".{age}" if age else "")
            if lvl == 3 and age >= 2:  # logrotate's delaycompress; mtime=0 keeps the bytes reproducible
                name, data = name + ".gz", gzip.compress(data, mtime=0)
            fixtures[f"logs/{name}"] = data
        older = (", and from `auth.log.2` on they are gzip-compressed (`auth.log.2.gz`, ...)" if lvl == 3 else "")
        repeat_rule = ("\n- rsyslog folds repeats: an sshd message `message repeated K times: [ Failed ...]` "
                       "stands for K more failed attempts from that address, all at that line's time."
                       if lvl >= 2 else "")
        out = "/app/bruteforce_logins.txt"
        body = (
            f"Overnight alerting flagged `{log.host}` for SSH password guessing. Its authentication logs "
            "are in `/app/logs/`: `auth.log` is the newest, then `auth.log.1` and so on back in time"
            f"{older}. Together they form one continuous syslog stream of lines "
            "`Mon DD HH:MM:SS host program[pid]: message`. Timestamps carry no year: the oldest entry is "
            f"from {year}, entries are in chronological order from the oldest file to the newest, and a "
            "month earlier than the previous line's means the year has rolled over.\n\n"
            "Find the logins that most likely came out of a brute-force attack:\n\n"
            "- A failed attempt is an sshd message `Failed <method> for <user> from <address> port <port> ...` "
            "(the user may be preceded by `invalid user `). PAM messages, `Invalid user` notices and "
            f"disconnects are not failed attempts.{repeat_rule}\n"
            "- A login is an sshd message `Accepted <method> for <user> from <address> port <port> ...`.\n"
            f"- A login is a finding when at least {threshold} failed attempts from the same address have a "
            f"time between {window} minutes before the login and the login's time, both ends included.\n\n"
            "Write one line per finding: `<address> <user> <first> <login> <count>` (single spaces), where "
            "`<user>` is the account that logged in, `<login>` the login's time, `<first>` the time of the "
            "earliest failed attempt counted for it and `<count>` how many were counted. Write times as "
            "`YYYY-MM-DDTHH:MM:SS` and addresses exactly as the log does. Sort the lines by login time, "
            "then address, then user (byte order)."
        )
        instruction = instruction_frame(sig, "Which SSH logins followed a brute-force burst?", body,
                                        [f"`{out}`: one line per finding, sorted as described."])
        test_initial = packaged_source(__name__, "test_initial_state.py.txt",
                                       NAMES=sorted(n.split("/", 1)[1] for n in fixtures), OUT=out)
        test_final = lines_final_test("test_findings_match", out, expected)
        solve = python_oracle(packaged_source(__name__, "oracle.py.txt", YEAR=year, WINDOW=window,
                                              THRESHOLD=threshold, OUT=out))
        return TaskSpec(
            instruction=instruction,
            setup_sh=bash_script("mkdir -p /app/logs && cp /tmp/env/fixtures/logs/* /app/logs/"),
            test_initial=test_initial,
            test_final=test_final,
            solve_sh=solve,
            truth={"given": {"host": log.host, "window_minutes": window, "threshold": threshold, "first_year": year},
                   "expected_lines": expected, "log_lines": len(records)},
            verifier_kind="exact_text",
            fixture_kind="text_only",
            fixtures=fixtures,
            output_paths=[out],
        )


FAMILY = SshBruteForceLogins
