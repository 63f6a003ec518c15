"""Reading a verifier's reward files on the host: Harbor's parsing rules, with nothing followed.

The verifier directory was writable from inside the sandbox, so whatever sits there may have
been put there by the agent: a symlink to a host file holding `1`, a FIFO that blocks a reader
forever, a directory, a sparse multi-GiB file. Everything is therefore opened relative to a
directory descriptor, without following symlinks and without blocking, and only a small regular
file is read. Anything else is "no reward" with a reason, never an exception.

Parsing follows Harbor 0.26 (`harbor/verifier/verifier.py`, `Verifier.verify` and
`_parse_reward_json` / `_parse_reward_text`): reward.json wins when present and must be a JSON
object of finite numbers; otherwise reward.txt must hold one finite number (Python `float()`
syntax), which becomes `{"reward": value}`; an empty file, unparsable text or a non-finite value
is a verifier parse error: no reward at all (not a 0). A JSON boolean is a number to Harbor
(`isinstance(True, int)` passes its check and `VerifierResult`'s `float | int` makes it 1.0): read
as 1.0 / 0.0 here too.

Harbor accepts any finite number; termforge's own safety rule on top (`range_problem`): a reward
outside [0, 1], or the task's declared range, is scored 0 with a finding by the caller (a reward of
1e308 or -1e308 would make a run's mean reward infinite, and 2 is not a pass rate).
"""

from __future__ import annotations

import errno
import json
import math
import os
import stat
from dataclasses import dataclass
from pathlib import Path

REWARD_JSON = "reward.json"
REWARD_TXT = "reward.txt"
# Harbor reads a reward file whole, whatever its size (harbor/verifier/verifier.py); the host reads
# one the sandbox wrote, so it keeps a bound, far above any real reward file (a reward.json of
# thousands of named rewards is a few hundred kB). Over it: no reward, with the reason.
MAX_REWARD_BYTES = 16 * 1024 * 1024
HEADLINE_KEY = "reward"
DEFAULT_REWARD_RANGE = (0.0, 1.0)


class UnsafeFile(Exception):
    """The entry at a path the host was asked to read is not a small regular file."""


@dataclass(frozen=True)
class RewardReading:
    """What a verifier directory says. `rewards` is Harbor's `VerifierResult.rewards`; None when
    there is no valid reward, and then `error` says why."""

    rewards: dict[str, float] | None
    source: str | None = None
    error: str | None = None

    @property
    def reward(self) -> float | None:
        """The headline value: the `reward` key when present, else the only key; a multi-key
        dict without `reward` has no single headline (Harbor then aggregates each key)."""
        if not self.rewards:
            return None
        if HEADLINE_KEY in self.rewards:
            return float(self.rewards[HEADLINE_KEY])
        if len(self.rewards) == 1:
            return float(next(iter(self.rewards.values())))
        return None

    @property
    def headline_key(self) -> str | None:
        if not self.rewards:
            return None
        if HEADLINE_KEY in self.rewards:
            return HEADLINE_KEY
        return next(iter(self.rewards)) if len(self.rewards) == 1 else None

    def to_dict(self) -> dict:
        return {"rewards": self.rewards, "reward": self.reward, "headline": self.headline_key,
                "source": self.source, "error": self.error}


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISLNK, "a symlink"), (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a regular file"


def open_dir_nofollow(path: Path) -> int:
    """A descriptor for the directory itself, refusing a symlink in its place."""
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise UnsafeFile(f"{path} is not a plain directory") from None
        raise


def read_small_file(name: str, dir_fd: int, max_bytes: int = MAX_REWARD_BYTES) -> bytes:
    """Read `name` inside `dir_fd`: a regular file of at most `max_bytes`, else UnsafeFile.
    Opens with O_NOFOLLOW|O_NONBLOCK so a symlink is refused and a FIFO never blocks."""
    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)  # FileNotFoundError: nothing there
    if not stat.S_ISREG(st.st_mode):
        raise UnsafeFile(f"{name} is {_kind(st.st_mode)}")
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        st = os.fstat(fd)  # what was opened, not what was stat-ed a moment before
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeFile(f"{name} is {_kind(st.st_mode)}")
        if st.st_size > max_bytes:
            raise UnsafeFile(f"{name} is {st.st_size} bytes (limit {max_bytes})")
        data = os.read(fd, max_bytes + 1)
        if len(data) > max_bytes:
            raise UnsafeFile(f"{name} grew past {max_bytes} bytes while being read")
        return data
    finally:
        os.close(fd)


def parse_reward_json(data: bytes) -> dict[str, float]:
    if not data:
        raise ValueError("reward.json is empty")
    try:
        rewards = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise ValueError("reward.json is not valid JSON") from None
    if not isinstance(rewards, dict):
        # Harbor's VerifierResult only accepts a dict of named rewards.
        raise ValueError(f"reward.json holds a {type(rewards).__name__}, not an object of named rewards")
    for key, value in rewards.items():
        if not isinstance(value, (int, float)):
            raise ValueError(f"reward.json: non-numeric reward {key}={value!r}")
        if not math.isfinite(value):
            raise ValueError(f"reward.json: non-finite reward {key}={value!r}")
    return {str(k): float(v) if isinstance(v, bool) else v for k, v in rewards.items()}


def range_problem(rewards: dict[str, float], reward_range: tuple[float, float] = DEFAULT_REWARD_RANGE) -> str | None:
    """Why a valid reading is not a reward termforge scores (a value outside the range), or None."""
    lo, hi = reward_range
    for key, value in rewards.items():
        if not lo <= value <= hi:
            return f"reward {key}={value!r} outside [{lo:g}, {hi:g}]"
    return None


def parse_reward_text(data: bytes) -> dict[str, float]:
    if not data:
        raise ValueError("reward.txt is empty")
    try:
        value = float(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise ValueError("reward.txt does not hold a number") from None
    if not math.isfinite(value):
        raise ValueError(f"reward.txt: non-finite reward {value!r}")
    return {HEADLINE_KEY: value}


def read_reward(verifier_dir: Path, max_bytes: int = MAX_REWARD_BYTES) -> RewardReading:
    """The verifier's rewards from `verifier_dir` (the host side of /logs/verifier)."""
    try:
        dir_fd = open_dir_nofollow(Path(verifier_dir))
    except FileNotFoundError:
        return RewardReading(None, None, f"no verifier directory {verifier_dir}")
    except (UnsafeFile, OSError) as exc:
        return RewardReading(None, None, str(exc))
    try:
        for name, parse in ((REWARD_JSON, parse_reward_json), (REWARD_TXT, parse_reward_text)):
            try:
                data = read_small_file(name, dir_fd, max_bytes)
            except FileNotFoundError:
                continue
            except (UnsafeFile, OSError) as exc:
                return RewardReading(None, name, str(exc))
            try:
                return RewardReading(parse(data), name, None)
            except ValueError as exc:
                return RewardReading(None, name, str(exc))
        return RewardReading(None, None, f"no {REWARD_JSON} or {REWARD_TXT} in the verifier directory")
    finally:
        os.close(dir_fd)
