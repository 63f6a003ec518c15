"""docs/families.md is the gallery termforge.generate.gallery writes: every family, current."""

from pathlib import Path

from termforge.generate.families import all_families
from termforge.generate.gallery import families_markdown

DOC = Path(__file__).resolve().parents[1] / "docs" / "families.md"


def test_the_gallery_is_current():
    text = families_markdown()
    assert DOC.read_text() == text, "docs/families.md is stale: run python -m termforge.generate.gallery docs/families.md"
    for fam in all_families():
        assert f"## {fam.name.replace('_', '-')}" in text and fam.summary in text
        assert all(f"`{knob}` " in text for knob in fam.knobs.per_level), f"{fam.name}: its difficulty knobs"
    assert "**opt-in**" in text  # the calibration family says it is drawn only on request
    # A family's declared anchors are context, never presented as anchors the task honours.
    assert "; anchors: " not in text and text.count("anchors its text mentions (context only, not honoured") == len(
        all_families())
