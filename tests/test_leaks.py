"""The shared leak detector (termforge.quality.leaks) and the hint gate on it: disguised answers
are caught whatever their form, values the task states are not, and every finding names the
secret's source without quoting it. A representative slice of the bench corpus runs here; the full
corpus is bench/bench_hint_gate.py."""

import base64
import hashlib
import codecs
import json

import pytest

from termforge.hints.corpus import corpus_tasks, load_corpus, score_gate
from termforge.hints.gate import LEAK_FINDINGS, check_hint
from termforge.quality.leaks import Secret, SecretSet, find_leaks, leak_kinds_summary, task_secrets

SLICE_FAMILIES = ("decay_half_life_fit", "binary_passphrase_recovery", "sqlite_shop_questions",
                  "regional_revenue_report", "python_edge_case_fix", "log_level_filter", "tone_inventory")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    leaks, honest = load_corpus()
    tasks = corpus_tasks(tmp_path_factory.mktemp("corpus"), seeds=(0, 1), families=SLICE_FAMILIES)
    return ([r for r in leaks if (r["family"], r["seed"]) in tasks],
            [r for r in honest if (r["family"], r["seed"]) in tasks], tasks)


def _secrets(**values):
    return SecretSet.from_values(values, "step:truth")


# -- the matcher, one disguise at a time ------------------------------------------------------------


@pytest.mark.parametrize("text,how", [
    ("the half-life is 56.04 s", "literal"),
    ("about 56.0400 seconds", "number"),
    ("T = 5.604e+01", "number"),
    ("T = 56040 ms", "unit"),
    ("fifty-six point zero four", "words"),
    ("T is 7*8.005", "arithmetic"),
    ("lambda = 0.012369", "derived"),  # ln2 / 56.04
    ("５６.０４ exactly", "number"),  # full-width digits fold to ASCII
    ("5\u200b6.04", "number"),  # a zero-width space inside
    ("read backwards: 40.65", "reversed"),
    (f"decode {base64.b64encode(b'56.04').decode()}", "base64"),
])
def test_numbers_in_any_form(text, how):
    [leak] = find_leaks(text, _secrets(half_life_s=56.04))
    assert leak.how == how, (text, leak)
    assert leak.secret.source == "step:truth:half_life_s"


@pytest.mark.parametrize("text,how", [
    ("the passphrase is f9q54vph", "literal"),
    ("it is F9Q54VPH", "normalised"),
    ("f 9 q 5 4 v p h", "spaced"),
    ("f-9-q-5-4-v-p-h", "spaced"),
    ("starts f9q5. Later, much later, it ends 4vph", "split"),
    ("f9q54v\u0440h", "normalised"),  # Cyrillic er for p
    (codecs.encode("the passphrase is f9q54vph", "rot13"), "rot13"),
    ("hpv45q9f", "reversed"),
    (f"hex {b'f9q54vph'.hex()}", "hex"),
    (f"b64 {base64.b64encode(b'f9q54vph').decode()}", "base64"),
])
def test_strings_in_any_form(text, how):
    [leak] = find_leaks(text, _secrets(passphrase="f9q54vph"))
    assert leak.how == how, (text, leak)


def test_scale_words_hex_integers_names_and_split_numbers():
    s = SecretSet.from_values({"q2": "2570666", "q3": "Ada Castillo", "uid_range": "1000-60000"}, "truth")
    assert find_leaks("about 2.57 million cents", s)[0].how == "words"
    assert find_leaks(f"in hex {hex(2570666)}", s)
    assert find_leaks("the surname is Castillo", s)
    assert find_leaks("it starts with 2570 and, much later, ends with 666", s)[0].how == "split"
    # Two numbers the task shows side by side are not a split secret.
    s.shown = frozenset({"1000", "60000"})
    assert not find_leaks("UID_MIN is often 1000 and UID_MAX 60000", s)


def test_separators_and_plain_rounding():
    s = _secrets(total="54661.47", count=2570666)
    assert {leak.secret.text for leak in find_leaks("sum 54,661.47 over 2 570 666 rows", s)} == {"54661.47", "2570666"}
    # Rounding that keeps three significant digits still tells the answer; two do not.
    assert find_leaks("near 54661", s) and not find_leaks("about 55 thousand items", _secrets(x=54.66))


def test_short_values_count_only_where_the_answer_stands():
    s = SecretSet.from_values({"answers": {"q1": "0", "q3": "7"}}, "private/truth.json")
    assert find_leaks("For q1 the result is 0, skip that query.", s)
    assert find_leaks("The expected answer is 7.", s)
    # The same digits as ordinary prose are no leak.
    assert not find_leaks("Exit status 0 means success; retry up to 7 times.", s)


def test_given_values_are_subtracted_in_any_format():
    s = SecretSet.from_values({"buffer": 1024, "name": "west"}, "truth", given="Use a 1,024-byte buffer in region `west`.")
    assert len(s) == 0 and s.dropped_given == 2
    assert not find_leaks("Read 1024 bytes at a time and filter region west.", s)


def test_sources_blame_the_step_that_wrote_the_secret():
    task = SecretSet.from_values({"token": "OPEN-62bb3375"}, "task")
    final_test = SecretSet.from_values({"expected": ["valley,14,19894.00"]}, "final_test")
    both = task.merge(final_test)
    fixture = "# cache\nOPEN 62bb3375\nrow valley 14 19,894.00\n"
    sources = {leak.secret.source.split(":")[0] for leak in find_leaks(fixture, both)}
    assert sources == {"task", "final_test"}
    summary = leak_kinds_summary(find_leaks(fixture, both))
    assert summary and not any("62bb" in line or "19894" in line for line in summary)


def test_bug_names_and_keys():
    s = SecretSet.from_values({"planted_bugs": {"loop": {"effect": "x"}, "off_by_one_end": {}},
                               "census": {"#17becf": [3, 800]}}, "truth")
    kinds = {leak.secret.kind for leak in find_leaks("The off by one end bug and the colour #17becf.", s)}
    assert kinds == {"bug_name", "answer_key"}
    # A one-word bug name is an everyday word until the text calls it a bug.
    assert not find_leaks("Loop over the files with a glob.", s)
    assert find_leaks("The loop bug is the culprit.", s)
    assert all("loop" not in sec.source and "17becf" not in sec.source for sec in s.secrets)


# -- the gate on real tasks: a slice of the corpus ---------------------------------------------------


def test_corpus_slice_recall_and_false_positives(corpus):
    leaks, honest, tasks = corpus
    assert len({r["family"] for r in leaks}) == len(SLICE_FAMILIES) and len(honest) >= 2 * len(SLICE_FAMILIES)
    caught = score_gate(lambda h, d: bool(set(check_hint(h, d, max_words=400).kinds()) & set(LEAK_FINDINGS)),
                        leaks, [], tasks)
    assert caught["recall"] >= 0.9, caught["missed"]
    # Honest hints pass the whole gate (leaks, form, and fit to their task).
    clean = score_gate(lambda h, d: not check_hint(h, d, max_words=400).passed, [], honest, tasks)
    assert clean["false_positives"] == 0, clean["false_positive_rows"]


def test_task_secrets_read_tests_and_subtract_the_environment(corpus):
    _, _, tasks = corpus
    revenue = tasks[("regional_revenue_report", 0)]
    secrets = task_secrets(revenue)
    assert any(s.kind == "answer" and s.source.startswith("private/truth.json") for s in secrets.secrets)
    # The header is asserted by the verifier but stated by the instruction: not a secret.
    assert not any(s.text == "region,paid_orders,revenue" for s in secrets.secrets)
    half_life = tasks[("decay_half_life_fit", 0)]
    t = json.loads((half_life / "private" / "truth.json").read_text())["half_life_s"]
    report = check_hint(f"Fit the counts in /app/data/counts.csv and aim for a half-life near {t:.3e} s.", half_life)
    # The detector reads the scientific notation; the allow-list sees a number the task never states,
    # and the answer key's value.
    assert report.kinds() == ["answer_value", "disguised_answer", "unsupported_specific"]
    assert str(t) not in json.dumps(report.to_dict())


def test_a_verifier_assertion_is_a_secret_even_without_truth(tmp_path):
    task = tmp_path / "t"
    (task / "tests").mkdir(parents=True)
    (task / "instruction.md").write_text("Write the digest of /app/data.bin to /app/out.txt.\n")
    (task / "tests" / "test_final_state.py").write_text(
        "EXPECTED = 'e3b0c44298fc1c149afbf4c8996fb924'\n\ndef test_x():\n    assert open('/app/out.txt').read() == EXPECTED\n")
    report = check_hint("Compute sha256 of /app/data.bin and compare with E3B0C44298FC1C149AFBF4C8996FB924.", task)
    assert "test_assertion" in report.kinds()
    assert set(report.kinds()) <= {"test_assertion", "unsupported_specific"}


def test_pieces_of_one_answer_line_and_code_of_the_fix(corpus):
    _, _, tasks = corpus
    revenue = tasks[("regional_revenue_report", 0)]
    truth = json.loads((revenue / "private" / "truth.json").read_text())
    region, orders, _ = truth["expected_rows"][0].split(",")
    # The top region is data the agent is shown, but naming it gives the answer's key away
    # (hints/specifics.py: answer values); the column it lives in does not.
    assert check_hint(f"Group /app/data/orders.csv by region, for example {region}.", revenue,
                      max_words=400).kinds() == ["answer_value"]
    assert check_hint("Group /app/data/orders.csv by the region column of customers.csv.", revenue).passed
    report = check_hint(f"In /app/report.csv the {region} row has {orders} paid orders.", revenue)
    assert "disguised_answer" in report.kinds(), report.to_dict(redact=False)
    # Restating the fix's code, even a part of it, is a leak; the buggy code is in the fixture.
    fix = tasks[("python_edge_case_fix", 0)]
    bugs = json.loads((fix / "private" / "truth.json").read_text())["planted_bugs"]
    fixed = next(b["fixed"] for b in bugs.values() if "kv[0]" in b["fixed"])
    tail = fixed[fixed.index("key="):]
    assert "disguised_answer" in check_hint(f"In /app/topwords.py sort with {tail}.", fix).kinds()
    assert check_hint("In /app/topwords.py sort by count, then by word, and rerun the examples.", fix).passed


def test_records_and_lists_of_the_expected_output():
    s = SecretSet.from_values({"expected_modes": ["data/cache.bin 0600", "conf/app.conf 0644"],
                               "expected_lines": ["dara:1364:deploy", "yusuf:1714:ops", "gita:3408:deploy"]},
                              "truth")
    # Every field shown by the environment: each is data, but two fields of one record, or the
    # names of three expected lines, describe the output.
    s = SecretSet([Secret(x.text, x.kind, x.source, x.context, weak=x.source.endswith(("(part)", "(field)")))
                   for x in s.secrets])
    assert find_leaks("data/cache.bin must become 0600", s)[0].how == "pieces"
    assert not find_leaks("data/cache.bin is one of the files to check.", s)
    assert not [x for x in find_leaks("Octal modes such as 0600 and 0644 are common.", s) if x.how == "pieces"]
    assert find_leaks("List dara, yusuf and gita.", s)[0].how == "pieces"
    assert not find_leaks("List the accounts, for example dara.", s)


# -- meaning, not spelling (termforge.quality.disguises) ---------------------------------------------


@pytest.mark.parametrize("text,how", [
    ("the half-life lands between 55.5 and 56.5 s", "narrowing"),
    ("about 56 ± 0.5 seconds", "narrowing"),
    ("it is either 56 or 57", "narrowing"),
    ("double 28.02 and you are there", "arithmetic"),
    ("subtract 3.96 from 60 to check", "arithmetic"),
    ("sechsundfünfzig Komma null vier", "words"),
    ("cinquante-six virgule zéro quatre", "words"),
    ("cincuenta y seis coma cero cuatro", "words"),
    ("五十六点零四", "words"),
])
def test_numbers_by_meaning(text, how):
    [leak] = find_leaks(text, _secrets(half_life_s=56.04))
    assert leak.how == how, (text, leak)


@pytest.mark.parametrize("text,how", [
    (f"the sha256 is {hashlib.sha256(b'f9q54vph').hexdigest()}", "digest"),
    (f"md5 {hashlib.md5(b'f9q54vph').hexdigest().upper()}", "digest"),
    ("shift back by three: i9t54ysk", "cipher"),
    ("mirror it: u9j54ekS", "cipher"),
    ("..-. ----. --.- ..... ....- ...- .--. ....", "morse"),
    ("foxtrot niner quebec five four victor papa hotel", "nato"),
    ("Filter rows. 9 passes are enough. Query the log. 5 minutes. 4 checks. Verify. Parse. Hash it.", "acrostic"),
    ("it matches ^f9q5.*ph$ exactly", "pattern"),
    ("look for f9q5?vp* in the output", "pattern"),
])
def test_strings_by_meaning(text, how):
    [leak] = find_leaks(text, _secrets(passphrase="f9q54vph"))
    assert leak.how == how, (text, leak)


@pytest.mark.parametrize("text", ["It began on 23 January 2023 at 3:19 AM.", "Check 23/01/2023 03:19.",
                                  "The first try was Jan 23, 2023, 03:19:34."])
def test_dates_in_any_format(text):
    leaks = find_leaks(text, _secrets(first_attempt="2023-01-23T03:19:34"))
    assert [leak.how for leak in leaks if leak.secret.text == "2023-01-23T03:19:34"] == ["date"], leaks
    # Another day, or the same day at another time, is not the answer.
    assert not [x for x in find_leaks(text.replace("23", "24"), _secrets(first_attempt="2023-01-23T03:19:34"))
                if x.secret.text == "2023-01-23T03:19:34"]


def test_honest_text_with_the_same_features_is_no_leak():
    s = _secrets(half_life_s=56.04, passphrase="f9q54vph", first_attempt="2023-01-23T03:19:34")
    for text in ("Search only 100 Hz to 3500 Hz and keep peaks within 3% of each other.",
                 "Hash each input with sha256sum before and after to prove you did not modify it.",
                 "Use a glob such as /app/logs/app.log.* and a regex like ^[a-z]+$ to reject bad names.",
                 "Add up the parts and double-check the total; half-open ranges are easy to get wrong.",
                 "Vérifiez chaque ligne et comparez avec le format demandé, puis triez avec sort -u.",
                 "Convert every timestamp to UTC before you compare them.",
                 "Echo the delta of each pair while you debug, then remove the echo lines."):
        assert not find_leaks(text, s), text


def test_common_words_are_never_secrets_on_their_own():
    # A planted bug's line `section = ""` must not make the word "section" a secret.
    s = SecretSet.from_values({"planted_bugs": {"default": {"buggy": 'section = ""', "fixed": 'section = "main"'}}},
                              "private/truth.json")
    assert not find_leaks("Read each section header and check which section a key before the first one gets.", s)
    assert find_leaks('Change section = "" so it reads the default.', s)


def test_pointers_to_the_planted_bug(tmp_path):
    from conftest import make_signature
    from termforge.generate.families import family_by_name
    from termforge.generate.procedural import generate_task
    from termforge.hints.gate import check_hint

    fam = family_by_name("shell_script_fix")
    task = generate_task(make_signature(0, fam.domains[0], fam.verifier_kinds[0], fam.fixture_kinds[0]),
                         tmp_path, families=[fam])
    [bp, *_] = task_secrets(task).pointers
    script = (task / "instruction.md").read_text()
    assert bp.file in script or bp.file.endswith(".sh")
    kinds = check_hint(f"Open /app/{bp.file} and go straight to line {bp.lines[0]}.", task).kinds()
    assert "bug_pointer" in kinds, kinds
    # A line number the text uses for something else is no pointer.
    assert "bug_pointer" not in check_hint(f"Open /app/{bp.file} and read line {bp.lines[0] + 40} of the log.",
                                           task).kinds()
