"""Host-side reading of reward files: Harbor's parsing rules, and nothing the agent planted is
followed, blocked on or read past a size cap (harbor/verifier/verifier.py, `Verifier.verify`,
`_parse_reward_json`, `_parse_reward_text`, Harbor 0.26)."""

import os

import pytest

from conftest import returns
from termforge.grading.reward_file import MAX_REWARD_BYTES, read_reward


def _dir(tmp_path, **files):
    d = tmp_path / "verifier"
    d.mkdir()
    for name, text in files.items():
        (d / name.replace("_", ".")).write_text(text)
    return d


@pytest.mark.parametrize("text, expected", [("1", 1.0), ("0\n", 0.0), (" 0.25 ", 0.25), ("1e0", 1.0)])
def test_reward_txt_numbers(tmp_path, text, expected):
    r = read_reward(_dir(tmp_path, reward_txt=text))
    assert r.rewards == {"reward": expected} and r.reward == expected and r.error is None


@pytest.mark.parametrize("text", ["", "nan", "inf", "-Infinity", "1 passed", "yes"])
def test_reward_txt_invalid_is_no_reward(tmp_path, text):
    # Harbor: empty -> RewardFileEmptyError, unparsable or non-finite -> VerifierOutputParseError.
    r = read_reward(_dir(tmp_path, reward_txt=text))
    assert r.rewards is None and r.reward is None and r.error


def test_reward_json_wins_and_keeps_every_key(tmp_path):
    r = read_reward(_dir(tmp_path, reward_txt="0", reward_json='{"accuracy": 0.5, "reward": 1, "style": 0}'))
    assert r.source == "reward.json"
    assert r.rewards == {"accuracy": 0.5, "reward": 1, "style": 0}
    assert r.reward == 1.0 and r.headline_key == "reward"


def test_reward_json_single_key_is_the_headline(tmp_path):
    r = read_reward(_dir(tmp_path, reward_json='{"score": 0.75}'))
    assert r.reward == 0.75 and r.headline_key == "score"


def test_reward_json_many_keys_without_reward_has_no_single_headline(tmp_path):
    r = read_reward(_dir(tmp_path, reward_json='{"a": 1, "b": 0}'))
    assert r.rewards == {"a": 1, "b": 0} and r.reward is None


@pytest.mark.parametrize("text", ["", "{", "1", "[1]", '{"reward": "1"}', '{"reward": NaN}',
                                  '{"reward": 1e309}', '{"reward": null}'])
def test_reward_json_invalid_is_no_reward(tmp_path, text):
    r = read_reward(_dir(tmp_path, reward_json=text, reward_txt="1"))
    assert r.rewards is None and r.source == "reward.json" and r.error


def test_symlink_to_a_host_file_is_not_followed(tmp_path):
    host = tmp_path / "host_secret"
    host.write_text("1")
    d = _dir(tmp_path)
    os.symlink(host, d / "reward.txt")
    r = read_reward(d)
    assert r.rewards is None and "symlink" in r.error


def test_symlinked_verifier_directory_is_refused(tmp_path):
    real = _dir(tmp_path, reward_txt="1")
    link = tmp_path / "link"
    os.symlink(real, link)
    assert read_reward(link).rewards is None


def test_directory_and_fifo_at_the_reward_path_cost_nothing(tmp_path):
    d = _dir(tmp_path)
    (d / "reward.json").mkdir()
    os.mkfifo(d / "reward.txt")
    r = returns(read_reward, d)  # a blocking open of the FIFO would never return
    assert r.rewards is None and "directory" in r.error
    (d / "reward.json").rmdir()
    r = returns(read_reward, d)
    assert r.rewards is None and "FIFO" in r.error


def test_huge_sparse_file_is_not_read(tmp_path):
    d = _dir(tmp_path)
    with open(d / "reward.txt", "wb") as f:
        f.truncate(8 << 30)
    r = read_reward(d)
    assert r.rewards is None and str(MAX_REWARD_BYTES) in r.error


def test_missing_files_and_directory(tmp_path):
    assert "no reward.json or reward.txt" in read_reward(_dir(tmp_path)).error
    assert read_reward(tmp_path / "absent").rewards is None


def test_json_booleans_are_numbers_as_harbor_makes_them(tmp_path):
    # harbor/verifier/verifier.py accepts them (bool is an int) and VerifierResult's `float | int`
    # turns True into 1.0.
    r = read_reward(_dir(tmp_path, reward_json='{"reward": true, "style": false}'))
    assert r.rewards == {"reward": 1.0, "style": 0.0} and type(r.rewards["reward"]) is float


@pytest.mark.parametrize("rewards, problem", [
    ({"reward": 1e308}, "reward reward=1e+308 outside [0, 1]"),
    ({"reward": -1e308}, "reward reward=-1e+308 outside [0, 1]"),
    ({"reward": 2}, "reward reward=2 outside [0, 1]"),
    ({"reward": 1, "style": 1.5}, "reward style=1.5 outside [0, 1]"),
    ({"reward": 0.5}, None),
    ({"reward": 1.0, "style": 0}, None),
])
def test_rewards_outside_the_range_are_named(rewards, problem):
    from termforge.grading.reward_file import range_problem

    assert range_problem(rewards) == problem
    assert range_problem({"reward": 40}, (0, 100)) is None
