import shutil

import pytest

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


def make_signature(index: int, domain: str, verifier_kind: str, fixture_kind: str, **extra) -> dict:
    """A hand-made signature for tests that target one family."""
    from termforge.io import make_task_id

    sig = {
        "index": index, "corpus_kind": "legacy", "domain": domain, "skill_type": "test",
        "skills": ["reading files", "shell pipelines", "careful output formatting"],
        "persona": "a careful on-call engineer", "language": "bash", "anchor": None,
        "task_complexity": "moderate", "command_complexity": "bash_code",
        "verifier_kind": verifier_kind, "fixture_kind": fixture_kind,
    }
    sig.update(extra)
    sig["id"] = make_task_id(1234, index, sig)
    return sig
