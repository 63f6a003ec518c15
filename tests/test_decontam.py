"""Decontamination: planted copies of reference instructions are caught, near duplicates inside the
corpus are clustered, clean tasks pass, and the report is deterministic and explains each hit."""

import json
import random
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from termforge.errors import ConfigError, TermforgeError
from termforge.io import canonical_json
from termforge.quality.decontam import (
    RefDoc,
    ReferenceIndex,
    decontaminate,
    load_harbor_references,
    load_hf_references,
    load_jsonl_references,
    ngram_hashes,
    task_document,
    word_tokens,
)

# A made-up benchmark instruction: long sentences (>= 13 words) so that n-grams survive light edits.
REF_BACKUP = (
    "Your job is to repair the nightly backup rotation on this server. "
    "The cron entry in /etc/cron.d/rotate writes archives into /srv/backups, but it keeps every "
    "archive forever and the disk filled up after 9 days. "
    "Rewrite /usr/local/bin/rotate.sh so that it keeps the 7 most recent daily archives and the 4 most "
    "recent weekly archives. "
    "Archives beyond that budget must be deleted without ever touching a file whose name does not "
    "follow the naming pattern backup-YYYY-MM-DD.tar.gz exactly. "
    "When you are done, run the script once and list the surviving archive names, one per line and "
    "sorted, in /app/remaining.txt."
)
REF_CERT = (
    "A TLS certificate bundle has been dropped into /app/certs together with a private key that may "
    "or may not belong to any of them. Find the certificate whose public key matches the private key, "
    "report its subject common name and its expiry date in ISO format, and write both values on two "
    "separate lines to /app/answer.txt without any extra commentary or trailing whitespace."
)
REF_SHORT = "Find the remainder of two to the hundredth power modulo seven."  # 11 words < n


def _vocab_text(seed: int, words: int) -> str:
    """Distinct, clean prose: random words from a seeded vocabulary, so no two texts share phrases."""
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocab = ["".join(rng.choice(letters) for _ in range(rng.randint(3, 9))) for _ in range(400)]
    return " ".join(rng.choice(vocab) for _ in range(words)) + "."


def make_task(root: Path, task_id: str, instruction: str, truth: dict | None = None,
              test_src: str | None = None) -> Path:
    task = root / task_id
    (task / "tests").mkdir(parents=True)
    (task / "private").mkdir()
    (task / "task.json").write_text(json.dumps({"id": task_id, "instruction": instruction}))
    (task / "instruction.md").write_text(instruction)
    (task / "private" / "truth.json").write_text(json.dumps(truth or {"answer": task_id}))
    (task / "tests" / "test_final_state.py").write_text(
        test_src or f"def test_answer():\n    assert open('/app/out_{task_id}.txt').read() == 'x'\n"
    )
    return task


def edited_copy(text: str) -> str:
    """Sentences reordered and every number changed: a lightly disguised copy."""
    sentences = [s.strip() for s in text.split(". ") if s.strip()]
    reordered = sentences[1::2] + sentences[0::2]
    swapped = ". ".join(reordered)
    for old, new in (("9", "11"), ("7", "5"), ("4", "3")):
        swapped = swapped.replace(old, new)
    return swapped


TWIN_TRUTH = {"answer": "same answer for both twins"}
TWIN_TEST = "def test_answer():\n    assert open('/app/out.txt').read() == 'same answer for both twins'\n"


@pytest.fixture
def references() -> list[RefDoc]:
    return [RefDoc("tb2/backup-rotation", "tb2", REF_BACKUP), RefDoc("tb2/cert-match", "tb2", REF_CERT),
            RefDoc("aime/7", "aime", REF_SHORT)]


@pytest.fixture
def corpus(tmp_path) -> dict[str, Path]:
    root = tmp_path / "tasks"
    tasks = {
        "tf-exact": make_task(root, "tf-exact", REF_BACKUP),
        "tf-edited": make_task(root, "tf-edited", "# Rotation\n\n" + edited_copy(REF_BACKUP)),
        # A near-duplicate pair: the larger id was written first, the smaller id must be the one kept.
        "tf-twin-b": make_task(root, "tf-twin-b", _vocab_text(1, 220), truth=TWIN_TRUTH, test_src=TWIN_TEST),
        "tf-twin-a": make_task(root, "tf-twin-a", _vocab_text(1, 220).replace(".", " extra closing words."),
                               truth=TWIN_TRUTH, test_src=TWIN_TEST),
    }
    for i in range(3):
        tid = f"tf-clean-{i}"
        tasks[tid] = make_task(root, tid, _vocab_text(100 + i, 200), truth={"value": 1000 + i})
    return tasks


def _hits_by_task(report: dict) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for hit in report["contamination"]:
        out.setdefault(hit["task_id"], []).append(hit)
    return out


def test_word_tokens_lowercase_alphanumeric():
    assert word_tokens("Run `rotate.sh` -- KEEP 7_daily, Größe!") == ["run", "rotate", "sh", "keep", "7", "daily", "größe"]


def test_ngram_hashes_short_text_and_equivalence():
    assert len(ngram_hashes("", 13)) == 0
    short = ngram_hashes("Three short words", 13)
    assert len(short) == 1
    assert list(short) == list(ngram_hashes("three, SHORT; words!", 13))
    assert list(short) != list(ngram_hashes("three short word", 13))
    tokens = word_tokens(REF_BACKUP)
    hashes = ngram_hashes(REF_BACKUP, 13)
    distinct_windows = {tuple(tokens[i:i + 13]) for i in range(len(tokens) - 12)}
    assert len(hashes) == len(distinct_windows)
    assert list(hashes) == sorted(hashes.tolist())


def test_index_does_not_join_windows_across_references(references):
    index = ReferenceIndex(references, n=13)
    a, b = word_tokens(REF_BACKUP), word_tokens(REF_CERT)
    assert index.shared_counts(REF_CERT) == {"tb2/cert-match": len(ngram_hashes(REF_CERT))}
    # The last words of one reference followed by the first words of the next is in neither.
    straddle = " ".join(a[-6:] + b[:7])
    assert index.shared_counts(straddle) == {}


def test_exact_and_edited_copies_caught_with_matching_words(corpus, references):
    report = decontaminate(list(corpus.values()), references)
    hits = _hits_by_task(report)

    exact = hits["tf-exact"]
    assert [h["ref_id"] for h in exact] == ["tb2/backup-rotation"]
    assert exact[0]["source"] == "tb2"
    assert exact[0]["shared_ngrams"] == len(ngram_hashes(REF_BACKUP))
    # The first shared n-gram of an exact copy is the reference's first 13 words.
    assert exact[0]["example_ngram"] == " ".join(word_tokens(REF_BACKUP)[:13])
    assert exact[0]["example_token_offset"] == 0

    edited = hits["tf-edited"]
    assert [h["ref_id"] for h in edited] == ["tb2/backup-rotation"]
    assert 0 < edited[0]["shared_ngrams"] < exact[0]["shared_ngrams"]
    words = edited[0]["example_ngram"].split()
    assert len(words) == 13
    ref_tokens, task_tokens = word_tokens(REF_BACKUP), word_tokens(task_document(corpus["tf-edited"]))
    assert any(ref_tokens[i:i + 13] == words for i in range(len(ref_tokens)))
    offset = edited[0]["example_token_offset"]
    assert task_tokens[offset:offset + 13] == words
    assert offset > 0  # the heading and the reordering moved it


def test_near_duplicates_inside_corpus(corpus, references):
    report = decontaminate(list(corpus.values()), references)
    assert report["near_duplicates"] == [{"task_id": "tf-twin-b", "kept": "tf-twin-a"}]
    assert report["near_duplicate_clusters"] == [{"kept": "tf-twin-a", "duplicates": ["tf-twin-b"], "size": 2}]
    # The exact and edited copies of one reference are not near duplicates of each other:
    # reordering and new numbers move them below the 0.8 threshold.
    assert "tf-edited" not in {t for c in report["near_duplicate_clusters"] for t in [c["kept"], *c["duplicates"]]}


def test_clean_tasks_not_flagged_and_policy_drop(corpus, references):
    report = decontaminate(list(corpus.values()), references, policy="drop")
    flagged = {f["task_id"]: f["reasons"] for f in report["flagged"]}
    assert flagged == {"tf-exact": ["contamination"], "tf-edited": ["contamination"],
                       "tf-twin-b": ["near_duplicate"]}
    assert report["dropped"] == ["tf-edited", "tf-exact", "tf-twin-b"]
    assert report["kept"] == ["tf-clean-0", "tf-clean-1", "tf-clean-2", "tf-twin-a"]
    summary = report["summary"]
    assert (summary["tasks"], summary["contaminated_tasks"], summary["near_duplicate_tasks"],
            summary["dropped"], summary["kept"]) == (7, 2, 1, 3, 4)
    assert report["references"]["sources"] == {"aime": 1, "tb2": 2}


def test_policy_flag_reports_everything_drops_nothing(corpus, references):
    drop = decontaminate(list(corpus.values()), references, policy="drop")
    flag = decontaminate(list(corpus.values()), references, policy="flag")
    assert flag["dropped"] == []
    assert flag["kept"] == sorted(corpus)
    assert flag["contamination"] == drop["contamination"]
    assert flag["flagged"] == drop["flagged"]
    assert flag["near_duplicates"] == drop["near_duplicates"]
    assert flag["params"]["policy"] == "flag"


def test_report_is_deterministic_and_order_independent(corpus, references):
    dirs = list(corpus.values())
    first = decontaminate(dirs, references)
    again = decontaminate(list(reversed(dirs)), list(references))
    assert canonical_json(first) == canonical_json(again)
    json.dumps(first)  # JSON-able as is


def test_short_reference_caught_inside_long_task(tmp_path, references):
    text = _vocab_text(7, 120) + " " + REF_SHORT + " " + _vocab_text(8, 80)
    task = make_task(tmp_path, "tf-aime-leak", text)
    report = decontaminate([task], references)
    assert [(h["ref_id"], h["example_ngram"]) for h in report["contamination"]] == [
        ("aime/7", " ".join(word_tokens(REF_SHORT)))
    ]


def test_truth_and_tests_are_part_of_the_document(tmp_path, references):
    # The instruction is clean, but the verifier embeds the reference text: still contamination.
    task = make_task(tmp_path, "tf-leaky-test", _vocab_text(9, 150),
                     test_src=f"EXPECTED = '''{REF_CERT}'''\n\ndef test_x():\n    assert EXPECTED\n")
    doc = task_document(task)
    assert "EXPECTED" in doc and json.dumps({"answer": "tf-leaky-test"}) in doc
    report = decontaminate([task], references)
    assert [h["ref_id"] for h in report["contamination"]] == ["tb2/cert-match"]


def test_min_shared_threshold(corpus, references):
    report = decontaminate([corpus["tf-edited"]], references, min_shared=10_000)
    assert report["contamination"] == [] and report["kept"] == ["tf-edited"]


def test_harbor_loader(tmp_path):
    root = tmp_path / "terminal-bench-2"
    for name, text in (("backup-rotation", REF_BACKUP), ("cert-match", REF_CERT)):
        (root / name / "tests").mkdir(parents=True)
        (root / name / "instruction.md").write_text(text)
        (root / name / "task.toml").write_text("version = '1.0'\n")
    (root / ".cache" / "junk").mkdir(parents=True)
    (root / ".cache" / "junk" / "instruction.md").write_text("ignored")
    refs = load_harbor_references(root, source="tb2")
    assert [(r.ref_id, r.source) for r in refs] == [("tb2/backup-rotation", "tb2"), ("tb2/cert-match", "tb2")]
    assert refs[1].text == REF_CERT
    assert load_harbor_references(root)[0].ref_id == "terminal-bench-2/backup-rotation"


def test_harbor_loader_errors_name_the_path(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(TermforgeError, match=str(missing)):
        load_harbor_references(missing)
    (tmp_path / "empty").mkdir()
    with pytest.raises(TermforgeError, match="instruction.md"):
        load_harbor_references(tmp_path / "empty")


def test_hf_loader_reads_local_parquet(tmp_path, corpus):
    path = tmp_path / "aime.parquet"
    pq.write_table(pa.table({"id": ["2024-I-1", "2024-I-2"], "problem": [REF_CERT, "Another problem."]}), path)
    refs = load_hf_references(str(path), column="problem", split="test", source="aime24", id_column="id",
                              cache_dir=tmp_path / "hf-cache")
    assert [(r.ref_id, r.source, r.text) for r in refs] == [
        ("aime24/2024-I-1", "aime24", REF_CERT), ("aime24/2024-I-2", "aime24", "Another problem.")
    ]
    task = make_task(tmp_path / "t", "tf-cert", "Intro words first. " + REF_CERT)
    report = decontaminate([task], refs)
    assert [h["ref_id"] for h in report["contamination"]] == ["aime24/2024-I-1"]

    with pytest.raises(TermforgeError, match="'question'"):
        load_hf_references(str(path), column="question", cache_dir=tmp_path / "hf-cache")


def test_hf_loader_reads_local_dataset_directory(tmp_path):
    data = tmp_path / "evalset"
    data.mkdir()
    (data / "test.jsonl").write_text(json.dumps({"question": REF_SHORT}) + "\n")
    refs = load_hf_references(str(data), column="question", split="test", cache_dir=tmp_path / "hf-cache")
    assert [r.text for r in refs] == [REF_SHORT]
    assert refs[0].ref_id == f"{data}/0"


def test_hf_loader_missing_path_names_it(tmp_path):
    missing = str(tmp_path / "absent.parquet")
    with pytest.raises(TermforgeError, match="absent.parquet"):
        load_hf_references(missing, column="problem")


def test_jsonl_loader(tmp_path):
    path = tmp_path / "own_eval.jsonl"
    path.write_text(json.dumps({"uid": "a", "prompt": REF_CERT}) + "\n\n" + json.dumps({"uid": "b", "prompt": "x"}) + "\n")
    refs = load_jsonl_references(path, "prompt", id_column="uid")
    assert [(r.ref_id, r.source) for r in refs] == [("own_eval/a", "own_eval"), ("own_eval/b", "own_eval")]
    with pytest.raises(TermforgeError, match=r"own_eval.jsonl:1: row has no column 'text'"):
        load_jsonl_references(path, "text")
    with pytest.raises(TermforgeError, match="missing.jsonl"):
        load_jsonl_references(tmp_path / "missing.jsonl", "prompt")


def test_bad_inputs_raise_clear_errors(tmp_path, corpus, references):
    with pytest.raises(TermforgeError, match="no-such-task"):
        decontaminate([tmp_path / "no-such-task"], references)
    with pytest.raises(ConfigError, match="policy"):
        decontaminate(list(corpus.values()), references, policy="delete")
    bare = tmp_path / "bare"
    bare.mkdir()
    with pytest.raises(TermforgeError, match="instruction.md"):
        task_document(bare)
    dup = make_task(tmp_path / "other", "tf-exact", "same id, other dir")
    with pytest.raises(TermforgeError, match="tf-exact"):
        decontaminate([corpus["tf-exact"], dup], references)
    with pytest.raises(TermforgeError, match="duplicate reference id"):
        ReferenceIndex([RefDoc("r", "s", "a"), RefDoc("r", "s", "b")])


def test_token_hashes_depend_only_on_the_token():
    # Tokens of many lengths at many byte offsets of one batch: equal tokens hash equal, distinct
    # tokens hash distinct, whatever document or position they sit at.
    from termforge.quality.decontam import _tokenize

    rng = random.Random(3)
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789ÄéßΩ"
    vocab = sorted({"".join(rng.choice(alphabet) for _ in range(rng.randint(1, 100))) for _ in range(3000)})
    texts = [" -- ".join(rng.choice(vocab) for _ in range(rng.randint(0, 60))) for _ in range(200)]
    batch = _tokenize(texts)
    words = [w for t in texts for w in word_tokens(t)]
    assert [batch.words(i, i + 1) for i in range(len(words))] == words
    by_word: dict[str, int] = {}
    for word, h in zip(words, batch.hashes.tolist()):
        assert by_word.setdefault(word, h) == h
    assert len(set(by_word.values())) == len(by_word)


def test_batch_size_does_not_change_the_report(corpus, references):
    big = decontaminate(list(corpus.values()), references, batch_size=512)
    small = decontaminate(list(corpus.values()), references, batch_size=2)
    assert canonical_json(big) == canonical_json(small)


def test_window_hashes_match_the_sequential_polynomial():
    # The vectorised block assembly must equal the plain left-to-right definition for every n.
    import numpy as np

    from termforge.quality.decontam import _window_hashes

    mask = (1 << 64) - 1

    def sequential(values):
        acc = 0x27D4EB2F165667C5
        for v in values:
            acc = (acc * 0x9E3779B97F4A7C15 + v) & mask
        for mul in (0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53, None):
            acc ^= acc >> 33
            if mul:
                acc = (acc * mul) & mask
        return acc

    rng = random.Random(11)
    tokens = [rng.getrandbits(64) for _ in range(40)]
    arr = np.array(tokens, dtype=np.uint64)
    for n in range(1, 41):
        got = _window_hashes(arr, n).tolist()
        assert got == [sequential(tokens[i:i + n]) for i in range(len(tokens) - n + 1)], n
    assert len(_window_hashes(arr, 41)) == 0


def test_mixed_batch_of_short_empty_and_long_documents(references):
    from termforge.quality.decontam import scan_documents

    index = ReferenceIndex(references + [RefDoc("tiny/1", "tiny", "Yes.")])
    docs = [("a-long", "Preamble words here. " + REF_CERT), ("b-empty", "  ...  "), ("c-tiny", "YES"),
            ("d-long", REF_BACKUP + " trailing"), ("e-two", "yes yes")]
    hits, seen = scan_documents(docs, index, batch_size=5)
    assert seen == [d for d, _ in docs]
    assert [(h["task_id"], h["ref_id"], h["example_ngram"]) for h in hits] == [
        ("a-long", "tb2/cert-match", " ".join(word_tokens(REF_CERT)[:13])),
        ("c-tiny", "tiny/1", "yes"),
        ("d-long", "tb2/backup-rotation", " ".join(word_tokens(REF_BACKUP)[:13])),
    ]


def test_summary_counts_contaminated_tasks_per_source(corpus, references):
    summary = decontaminate(list(corpus.values()), references)["summary"]
    assert summary["contaminated_tasks_by_source"] == {"tb2": 2}


def test_near_duplicate_chains_form_one_cluster_kept_by_smallest_id():
    import numpy as np

    from termforge.quality.decontam import NearDuplicateFinder

    shingles = np.random.default_rng(5).integers(0, 2**63, 1200, dtype=np.uint64)
    finder = NearDuplicateFinder(threshold=0.74, num_perm=256)
    # Jaccard: a~b 0.82, b~c 0.82, a~c 0.67 (below the threshold), d unrelated.
    finder.add("a", shingles[0:1000])
    finder.add("b", shingles[100:1100])
    finder.add("c", shingles[200:1200])
    finder.add("d", np.random.default_rng(6).integers(0, 2**63, 1000, dtype=np.uint64))
    finder.add("e", np.empty(0, dtype=np.uint64))
    assert [(x, y) for x, y, _ in finder.pairs] == [("a", "b"), ("b", "c")]
    assert finder.duplicate_of() == {"b": "a", "c": "a"}


def test_empty_corpus_and_empty_references(tmp_path, references):
    empty = decontaminate([], references)
    assert empty["kept"] == [] and empty["summary"]["tasks"] == 0
    task = make_task(tmp_path, "tf-solo", _vocab_text(4, 100))
    alone = decontaminate([task], [])
    assert alone["kept"] == ["tf-solo"] and alone["references"]["distinct_ngrams"] == 0


def test_near_duplicates_can_be_flagged_while_contamination_is_dropped(corpus, references):
    report = decontaminate(list(corpus.values()), references, policy="drop", near_dup_policy="flag")
    assert report["dropped"] == ["tf-edited", "tf-exact"]
    assert "tf-twin-b" in report["kept"]
    assert {"task_id": "tf-twin-b", "reasons": ["near_duplicate"]} in report["flagged"]
    assert report["params"]["near_dup_policy"] == "flag"


def test_non_ascii_fast_path_equals_the_regex_definition():
    # The vectorised non-ASCII path must give exactly re's [^\W_]+ tokens of the lowercased text,
    # including characters whose lowercase changes length (İ) and numerics such as ½.
    import re

    from termforge.quality.decontam import _tokenize

    rng = random.Random(17)
    alphabet = "abcXYZ019 _-.,\n\t\0ÄéßΩΣσİK—→“”½²٣\u0301日本🙂𝐀"
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 80))) for _ in range(400)]
    texts.append(" ".join(texts[:150]))  # many non-ASCII words: the whole-text path
    token_re = re.compile(r"[^\W_]+")
    for text in texts:
        assert word_tokens(text) == token_re.findall(text.lower()), text
    # The batch path (per-word fix-up of mostly-ASCII bytes, or the whole-text path) agrees too.
    expected = [w for text in texts for w in token_re.findall(text.lower())]
    tokens = _tokenize(texts)
    assert [tokens.words(i, i + 1) for i in range(len(expected))] == expected
    # Mixed batches (ASCII and not, str and bytes as read from disk) give the same token hashes.
    batch = _tokenize(texts)
    as_bytes = _tokenize([t.encode("utf-8") for t in texts])
    assert batch.hashes.tolist() == as_bytes.hashes.tolist() and batch.offsets.tolist() == as_bytes.offsets.tolist()
    one_by_one = [h for t in texts for h in _tokenize([t]).hashes.tolist()]
    assert batch.hashes.tolist() == one_by_one


def test_planted_copy_inside_non_ascii_text_is_caught(tmp_path, references):
    text = "Résumé — naïve “setup” → " + REF_CERT.replace("private key", "private kéy", 1) + " … ½"
    task = make_task(tmp_path, "tf-accents", text)
    report = decontaminate([task], references)
    assert [h["ref_id"] for h in report["contamination"]] == ["tb2/cert-match"]


def test_near_duplicate_pass_can_be_switched_off(corpus, references):
    on = decontaminate(list(corpus.values()), references)
    off = decontaminate(list(corpus.values()), references, near_dups=False)
    assert on["near_duplicates"] and off["near_duplicates"] == [] and off["near_duplicate_clusters"] == []
    assert off["params"]["near_dups"] is False and off["contamination"] == on["contamination"]


def test_each_task_file_is_read_once(corpus, references, monkeypatch):
    import builtins
    import collections
    import os

    from termforge.quality import decontam as mod

    opened = collections.Counter()
    real_open, real_os_open = builtins.open, os.open

    def counting(real):
        def wrapper(path, *a, **k):
            opened[str(path)] += 1
            return real(path, *a, **k)
        return wrapper

    monkeypatch.setattr(builtins, "open", counting(real_open))
    monkeypatch.setattr(os, "open", counting(real_os_open))
    pairs = [(d.name, d) for d in corpus.values()]
    mod.decontaminate_tasks(pairs, references)
    assert opened and max(opened.values()) == 1
    assert not any(p.endswith("task.json") for p in opened), "ids come from the caller, task.json is not needed"


def test_a_large_family_of_look_alikes_is_one_cluster_found_in_linear_comparisons():
    import numpy as np

    from termforge.quality.decontam import NearDuplicateFinder

    base = np.random.default_rng(8).integers(0, 2**63, 2000, dtype=np.uint64)
    finder = NearDuplicateFinder(threshold=0.8)
    compared = 0
    real_estimates = finder.estimates_pairwise

    def counting(a, b):
        nonlocal compared
        compared += len(a)
        return real_estimates(a, b)

    finder.estimates_pairwise = counting
    rng = np.random.default_rng(9)
    n = 300
    for i in range(n):
        doc = base.copy()
        doc[rng.integers(0, len(doc), 40)] = rng.integers(0, 2**63, 40, dtype=np.uint64)  # Jaccard ~0.96
        finder.add(f"t{i:04d}", doc)
    clusters = finder.clusters()
    assert clusters == [{"kept": "t0000", "duplicates": [f"t{i:04d}" for i in range(1, n)], "size": n}]
    # Candidates are a bucket's first and previous member per band: linear in the tasks, far
    # below the n(n-1)/2 pairs that a query-everything LSH confirms one by one.
    bands = finder.num_perm // finder.BAND_ROWS
    assert compared <= 2 * bands * n < n * (n - 1) // 2
    assert len(finder.pairs) <= compared


def test_worker_processes_give_the_same_report(tmp_path, references, monkeypatch):
    from termforge.quality import decontam as mod

    monkeypatch.setattr(mod, "WORKER_CHUNK", 4)
    pairs = []
    for i in range(13):
        text = _vocab_text(100 + i % 5, 120) + (" " + REF_CERT if i == 7 else "") + (" é" if i % 3 else "")
        pairs.append((f"tf-{i:02d}", make_task(tmp_path, f"tf-{i:02d}", text)))
    one = mod.decontaminate_tasks(pairs, references)
    many = mod.decontaminate_tasks(pairs, references, workers=3)
    assert canonical_json(one) == canonical_json(many)
    assert one["near_duplicate_clusters"] and [h["task_id"] for h in one["contamination"]] == ["tf-07"]


# -- shard documents files: generate records each task's text; decontaminate reads it where fresh ---


def _shard(tmp_path, corpus: dict[str, Path]) -> Path:
    """A shard manifest for the corpus fixture and its documents file (as generate writes them)."""
    from termforge.quality.decontam import documents_path, task_document_bytes, write_task_documents

    tasks_dir = next(iter(corpus.values())).parent
    ids = sorted(corpus)
    manifest = tmp_path / "manifests" / "00000.json"
    manifest.parent.mkdir()
    manifest.write_text(json.dumps({"shard": "00000", "tasks_dir": str(tasks_dir),
                                    "tasks": [{"id": tid} for tid in ids]}))
    write_task_documents(documents_path(manifest), tasks_dir, [(tid, task_document_bytes(corpus[tid])) for tid in ids])
    return manifest


def test_documents_file_present_or_absent_gives_the_same_report(tmp_path, corpus, references, monkeypatch):
    from termforge.quality import decontam as mod

    manifest = _shard(tmp_path, corpus)
    tasks, documents = mod.manifest_tasks([manifest])
    assert sorted(documents) == sorted(corpus) == [tid for tid, _ in tasks]
    # With every document known, no task file is opened at all.
    monkeypatch.setattr(mod, "task_document_bytes", lambda d: pytest.fail(f"read {d} despite its document"))
    with_docs = mod.decontaminate_tasks(tasks, references, documents=documents)
    monkeypatch.setattr(mod, "WORKER_CHUNK", 2)  # worker processes take the documents along
    assert canonical_json(mod.decontaminate_tasks(tasks, references, documents=documents, workers=2)) == \
        canonical_json(with_docs)
    monkeypatch.undo()
    mod.documents_path(manifest).unlink()
    tasks_again, none = mod.manifest_tasks([manifest])
    assert none == {} and tasks_again == tasks
    without = mod.decontaminate_tasks(tasks, references)
    assert canonical_json(with_docs) == canonical_json(without)
    assert [h["task_id"] for h in without["contamination"]] == ["tf-edited", "tf-exact"]


def test_stale_or_foreign_documents_are_read_from_the_task_directories(tmp_path, corpus, references):
    import os

    from termforge.io import atomic_write_text
    from termforge.quality import decontam as mod

    manifest = _shard(tmp_path, corpus)
    docs_file = mod.documents_path(manifest)
    # The documents file was written right after the tasks; later one clean task's instruction was
    # replaced (atomically, as every termforge write is) by a copy of a reference.
    written = max(os.stat(d).st_ctime_ns for d in corpus.values())
    os.utime(docs_file, ns=(written, written))
    time.sleep(0.05)  # past the file system's coarse timestamp tick
    atomic_write_text(corpus["tf-clean-0"] / "instruction.md", REF_CERT)
    tasks, documents = mod.manifest_tasks([manifest])
    assert "tf-clean-0" not in documents and len(documents) == len(corpus) - 1
    report = mod.decontaminate_tasks(tasks, references, documents=documents)
    assert "tf-clean-0" in {h["task_id"] for h in report["contamination"]}
    assert canonical_json(report) == canonical_json(mod.decontaminate_tasks(tasks, references))
    # A file written for other tasks, another tasks_dir, another format, or cut short: not used.
    ids = sorted(corpus)
    tasks_dir = str(corpus[ids[0]].parent)
    good = docs_file.read_bytes()
    assert mod.read_task_documents(docs_file, tasks_dir, ids[:-1]) == {}
    assert mod.read_task_documents(docs_file, tasks_dir + "-elsewhere", ids) == {}
    for bad in (good[:-1], good.replace(b"termforge-task-documents/1", b"termforge-task-documents/0"), b"junk"):
        docs_file.write_bytes(bad)
        assert mod.read_task_documents(docs_file, tasks_dir, ids) == {}


def test_document_from_files_equals_the_document_read_back(tmp_path):
    from termforge.generate.procedural import write_task
    from termforge.quality.decontam import task_document_bytes, task_document_from_files

    from termforge.axes.sampler import sample_signatures
    from termforge.axes.taxonomy import load_taxonomy

    sig = sample_signatures(1, 3, {"legacy": 1.0}, load_taxonomy())[0]
    final, files = write_task(sig, tmp_path)
    assert files is not None and task_document_from_files(files) == task_document_bytes(final)
    again, kept = write_task(sig, tmp_path)
    assert again == final and kept is None


def test_generate_writes_fresh_documents_and_decontaminate_uses_them(tmp_path, monkeypatch):
    from termforge import cli
    from termforge.quality import decontam as mod

    root = Path(__file__).resolve().parents[1]
    r = tmp_path / "results"
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "instruction.md").write_text(REF_BACKUP)
    overlay = tmp_path / "small.yaml"
    overlay.write_text("corpus: {n_tasks: 3, shard_size: 3}\ngenerate: {workers: 1}\n"
                       f"decontam: {{harbor_dirs: [{tmp_path / 'bench'}], hf_datasets: [], jsonl: []}}\n")
    cfgs = [str(root / "config.yaml"), str(overlay)]
    assert cli.main(["sample-axes", "--configfile", *cfgs, "--out", str(r / "axes/signatures.jsonl"),
                     "--stats", str(r / "axes/stats.json")]) == 0
    manifest = r / "tasks/manifests/00000.json"
    assert cli.main(["generate", "--configfile", *cfgs, "--signatures", str(r / "axes/signatures.jsonl"),
                     "--shard", "00000", "--tasks-dir", str(r / "tasks"), "--out", str(manifest)]) == 0
    tasks, documents = mod.manifest_tasks([manifest])
    assert len(tasks) == 3 and {tid: mod.task_document_bytes(d) for tid, d in tasks} == documents

    def decontaminate(out: Path) -> bytes:
        assert cli.main(["decontaminate", "--configfile", *cfgs, "--manifests", str(manifest),
                         "--out", str(out)]) == 0
        return out.read_bytes()

    reads = []
    real = mod.task_document_bytes
    monkeypatch.setattr(mod, "task_document_bytes", lambda d: reads.append(d) or real(d))
    with_docs = decontaminate(tmp_path / "a.json")
    assert reads == []
    mod.documents_path(manifest).unlink()  # e.g. a shard written by another tool: read from the directories
    assert decontaminate(tmp_path / "b.json") == with_docs and len(reads) == 3


def test_kgram_prefilter_gives_the_report_of_probing_every_window(monkeypatch):
    # Windows are hashed only where the k-grams at both ends occur in a reference; probing every
    # window (the prefilter off: k larger than every window) must give the same report.
    from termforge.quality import decontam as mod

    rng = random.Random(5)
    refs = [RefDoc(f"r/{i}", "r", _vocab_text(300 + i, rng.randint(40, 200))) for i in range(6)]
    refs.append(RefDoc("r/short", "r", _vocab_text(399, 9)))  # a short reference: windows of 9
    docs = []
    for i in range(60):
        words = _vocab_text(500 + i, rng.randint(0, 120)).split()
        ref_words = rng.choice(refs).text.split()
        if i % 3 == 0 and len(ref_words) > 14:  # a span of a reference, sometimes with edits
            a = rng.randrange(len(ref_words) - 13)
            span = ref_words[a:a + rng.randint(9, 20)]
            if i % 2:
                span[rng.randrange(len(span))] = "édité"
            words[rng.randint(0, len(words)):0] = span
        if i % 7 == 0:
            words = ref_words[:rng.randint(1, 12)]  # whole documents shorter than n
        docs.append((f"t{i:03d}", " ".join(words)))
    docs.append(("t999", _vocab_text(600, 30) + " " + refs[-1].text + " " + _vocab_text(601, 30)))
    docs.append(("t998", _vocab_text(602, 20) + " " + " ".join(refs[0].text.split()[:13])))  # ends the text
    fast = mod.decontaminate_documents(docs, refs, batch_size=16)
    assert fast["contamination"] and any(h["ref_id"] == "r/short" for h in fast["contamination"])
    monkeypatch.setattr(mod, "PREFILTER_K", 10**6)
    assert canonical_json(mod.decontaminate_documents(docs, refs, batch_size=16)) == canonical_json(fast)


def test_non_ascii_runs_folded_alone_equal_the_whole_text_fold():
    # Only the runs of bytes >= 0x80 are decoded and folded; that equals folding the whole text
    # because the fold is per code point and idempotent, and ASCII bytes cut UTF-8 sequences.
    import numpy as np

    from termforge.quality.decontam import _code_point_fold, _tokenize

    bmp = np.arange(0x10000, dtype=np.uint32)
    once = _code_point_fold(bmp)
    assert (_code_point_fold(once[once != 32]) == once[once != 32]).all()
    rng = random.Random(23)
    pieces = ["ab", "Ž", "ÉTÉ", "x9", "—", "Σ", "İ", "\u0301", "日本", "🙂", "½", " ", ".", "K", "ǅ"]
    raw = [b"\xff", b"\xe2\x80", b"\xc3", b"\x80\x80"]  # invalid UTF-8: replaced, never a token
    docs = []
    for _ in range(200):
        parts = [rng.choice(pieces).encode() if rng.random() < 0.85 else rng.choice(raw)
                 for _ in range(rng.randint(0, 30))]
        docs.append(b"".join(parts))
    batch = _tokenize(docs)
    expected = [w for d in docs for w in word_tokens(d.decode("utf-8", errors="replace"))]
    assert [batch.words(i, i + 1) for i in range(len(expected))] == expected
    assert batch.offsets.tolist()[-1] == len(expected)
    one_by_one = [h for d in docs for h in _tokenize([d]).hashes.tolist()]
    assert batch.hashes.tolist() == one_by_one


def test_chunked_atomic_write_survives_short_writes(tmp_path, monkeypatch):
    # The documents file is written with gathered writes; a write that takes only part of the
    # buffers (allowed by POSIX) must resume mid-chunk.
    import os

    from termforge.io import atomic_write_chunks

    real = os.writev
    monkeypatch.setattr(os, "writev", lambda fd, bufs: real(fd, [bytes(bufs[0][:7])]))
    chunks = [b"header\n", b"", b"x" * 20, b"abc", b"\xff" * 9]
    atomic_write_chunks(tmp_path / "f.docs", chunks)
    assert (tmp_path / "f.docs").read_bytes() == b"".join(chunks)


def test_tokens_that_differ_anywhere_hash_apart():
    # Tokens of 9 to 40 bytes differing in one byte (first word, middle words, last 8 bytes, or
    # the bytes where the first and last words overlap) and tokens of 8/16/24 bytes: distinct
    # tokens, distinct hashes; equal tokens at any alignment, equal hashes.
    from termforge.quality.decontam import _tokenize

    words = set()
    for length in (7, 8, 9, 15, 16, 17, 23, 24, 25, 33, 40, 64, 65, 200):  # > 64 bytes: one digest each
        base = "a" * length
        words.add(base)
        for at in range(length):
            words.add(base[:at] + "b" + base[at + 1:])
    words = sorted(words)
    texts = [" " * shift + " ".join(words) for shift in range(8)]  # every byte alignment
    batch = _tokenize(texts)
    per_text = batch.hashes.reshape(8, len(words))
    assert (per_text == per_text[0]).all()
    assert len(set(per_text[0].tolist())) == len(words)


def test_folded_runs_from_the_cache_and_padded_separators_give_the_regex_tokens():
    import re

    from termforge.quality import decontam as mod

    token_re = re.compile(r"[^\W_]+")
    texts = ["a—b", "x…y½z", "Ωmega—ΩMEGA", "café—CAFÉ→naïve", "“q”", "KELVIN:\u212a1", "ǅx—ǅ", "\u00a0pad\u00a0"]
    expected = [w for t in texts for w in token_re.findall(t.lower())]
    mod._RUN_FOLDS.clear()
    mod._CONTEXT_RUNS.clear()
    cold = mod._tokenize(texts)
    warm = mod._tokenize(texts)  # every run now comes from the cache
    assert [cold.words(i, i + 1) for i in range(len(expected))] == expected
    assert cold.hashes.tolist() == warm.hashes.tolist() and cold.offsets.tolist() == warm.offsets.tolist()
    assert mod._RUN_FOLDS["—".encode()] == b"   "  # a separator fold padded to the run's length


def test_sketches_of_uncut_windows_equal_sketches_of_each_document_alone():
    # window_sketches leaves the windows that cross a document's end in the batch's array (as
    # empty values); each document's sketch must equal its sketch scanned alone, where no window
    # crosses anything, for windows longer and shorter than some documents.
    import numpy as np

    from termforge.quality.decontam import NearDuplicateFinder, _tokenize, _window_hashes

    texts = ["", "one", "two words", "four words right here", "five words are right here",
             _vocab_text(7, 300), _vocab_text(8, 40), "x y z", _vocab_text(9, 6)]
    batch = _tokenize(texts)
    finder = NearDuplicateFinder(num_perm=32, seed=3)
    for width in (1, 3, 5, 8):
        windows = _window_hashes(batch.hashes, width, finalise=False)
        got, sizes = finder.window_sketches(windows, batch.offsets, width, batch.hashes)
        for d, text in enumerate(texts):
            alone = _tokenize([text])
            one, size = finder.window_sketches(_window_hashes(alone.hashes, width, finalise=False), alone.offsets,
                                               width, alone.hashes)
            assert (got[d] == one[0]).all() and sizes[d] == size[0], (width, d)
        assert sizes == [max(n - width + 1, min(n, 1)) for n in np.diff(batch.offsets).tolist()]


def test_byte_prefilter_keeps_every_pair_the_full_estimate_confirms():
    import numpy as np

    from termforge.quality.decontam import NearDuplicateFinder, _row_counts

    rng = np.random.default_rng(12)
    for num_perm, threshold in ((64, 0.8), (256, 0.7), (12, 0.5)):
        finder = NearDuplicateFinder(threshold=threshold, num_perm=num_perm)
        base = rng.integers(0, 2**63, 400, dtype=np.uint64)
        for i in range(120):
            doc = base.copy()
            doc[rng.integers(0, len(doc), rng.integers(0, 160))] = rng.integers(0, 2**63, 1)[0]
            finder.add(f"t{i:03d}", doc if i % 4 else rng.integers(0, 2**63, 400, dtype=np.uint64))
        cand = finder._candidates()
        est = finder.estimates_pairwise(finder._store[cand[:, 0]], finder._store[cand[:, 1]])
        ids = finder._ids
        want = sorted((ids[a], ids[b], e) for (a, b), e in zip(cand.tolist(), est.tolist()) if e >= threshold)
        assert finder.pairs == want and want, num_perm
        flags = rng.random((50, num_perm)) < 0.6
        assert _row_counts(flags).tolist() == np.count_nonzero(flags, axis=1).tolist()


def test_shared_ngram_counts_equal_a_plain_set_intersection():
    # The array grouping of shared windows per document and reference against the plain
    # definition: distinct shared word n-grams, with references that share n-grams themselves,
    # a short reference (windows of its own length) and documents with several references.
    from termforge.quality.decontam import ReferenceIndex, scan_documents

    rng = random.Random(31)
    refs = [RefDoc(f"r/{i}", "r", _vocab_text(700 + i, rng.randint(20, 90))) for i in range(5)]
    refs.append(RefDoc("r/copy", "r", refs[0].text + " " + refs[1].text[:200]))
    refs.append(RefDoc("r/short", "r", _vocab_text(799, 10)))
    docs = []
    for i in range(40):
        words = _vocab_text(800 + i, rng.randint(0, 80)).split()
        for _ in range(rng.randint(0, 3)):
            ref_words = rng.choice(refs).text.split()
            a = rng.randrange(len(ref_words))
            words[rng.randint(0, len(words)):0] = ref_words[a:a + rng.randint(5, 40)]
        docs.append((f"d{i:02d}", " ".join(words)))
    index = ReferenceIndex(refs, 13)
    hits, _ = scan_documents(docs, index, batch_size=7)

    def grams(tokens, n):
        return {tuple(tokens[k:k + n]) for k in range(len(tokens) - n + 1)} if len(tokens) >= n else {tuple(tokens)}

    # Documents are probed with windows of 13 and of each short reference's length; a text shorter
    # than a window is one whole-sequence n-gram.
    widths = [13, *index.short_lengths]
    assert widths == [13, 10]
    want = {}
    for tid, text in docs:
        tokens = word_tokens(text)
        doc_grams = set().union(*(grams(tokens, w) for w in widths)) if tokens else set()
        for ref in refs:
            shared = doc_grams & grams(word_tokens(ref.text), 13)
            if shared:
                want[(tid, ref.ref_id)] = len(shared)
    assert {(h["task_id"], h["ref_id"]): h["shared_ngrams"] for h in hits} == want
    for h in hits:
        assert h["example_ngram"] in " ".join(word_tokens(dict(docs)[h["task_id"]]))


def test_reference_index_lists_each_reference_once_per_ngram_in_order():
    # n-grams repeated inside a reference and shared by several references: each hash lists the
    # references holding it exactly once, in reference order, as the plain definition says.
    import numpy as np

    from termforge.quality.decontam import ngram_hashes

    base = _vocab_text(41, 60)
    texts = [base + " " + base, _vocab_text(42, 50), base, _vocab_text(43, 30) + " " + base[:200], base]
    refs = [RefDoc(f"r/{i}", "r", t) for i, t in enumerate(texts)]
    index = ReferenceIndex(refs, 13)
    want: dict[int, list[int]] = {}
    for i, ref in enumerate(refs):
        for h in ngram_hashes(ref.text, 13).tolist():
            want.setdefault(h, []).append(i)
    assert sorted(want) == index.hashes.tolist()
    assert {h: index.ref_indices(h) for h in want} == want
    assert (np.diff(index.offsets) >= 1).all() and len(index.ref_of) == index.offsets[-1]
