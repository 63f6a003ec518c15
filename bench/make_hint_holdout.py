"""Write bench/data/hint_corpus/holdout/: leaking hints in disguise kinds that no other corpus file
and no detector was written against, and honest hints that quote the instruction and name the
task's files and columns. bench/bench_hint_gate.py --holdout scores the gate on it.

The kinds (one or two hints each, every leak embedded in otherwise on-task guidance): the answer
as a plain sentence naming its row, a paraphrase of planted bugs in the code's own identifiers,
a restatement of the verifier's fixed edge cases, Roman numerals, alphabet positions, leetspeak,
emoji keycap digits, base32, base85, URL-encoding, a value inside "for example", a unit
conversion, an ordinal pointer into a file, a square root or power, binary and octal, a Greek
transliteration, the last letters of words, pig latin, the row's share of the total, word
lengths as digits, keyboard-neighbour typing. Written once, before the gate that is measured on it
(hints/specifics.py) was run on them; never edited to fit a result.

    .venv/bin/python bench/make_hint_holdout.py
"""

from __future__ import annotations

import base64
import json
import urllib.parse
from pathlib import Path

OUT = Path(__file__).resolve().parent / "data" / "hint_corpus" / "holdout"


def b32(s: str) -> str:
    return base64.b32encode(s.encode()).decode().rstrip("=")


def b85(s: str) -> str:
    return base64.b85encode(s.encode()).decode()


def url(s: str) -> str:
    return "".join(f"%{b:02X}" for b in s.encode())


def positions(s: str) -> str:
    return "-".join(str(ord(c) - 96) for c in s)


def keycaps(n: str) -> str:
    return "".join(d + "\ufe0f\u20e3" for d in n)


def leet(s: str) -> str:
    return s.translate(str.maketrans("aeiolst", "4310157"))


def pig(s: str) -> str:
    i = next(k for k, c in enumerate(s) if c in "aeiou")
    return s[i:] + s[:i] + "ay"


def last_letters(word: str) -> str:
    # Words chosen so that their last letters spell `word`.
    bank = {"v": "Kiev", "a": "data", "l": "total", "e": "file", "y": "every", "c": "basic", "o": "into",
            "s": "rows", "t": "first", "r": "order", "m": "item", "n": "column", "h": "each", "b": "club",
            "d": "read", "i": "taxi", "u": "you", "k": "check", "g": "string", "p": "group"}
    return " ".join(bank[c] for c in word)


NEIGHBOUR = dict(zip("qwertyuiopasdfghjklzxcvbnm", "wertyuiopqsdfghjklaxcvbnmz"))


def keyboard(s: str) -> str:
    return "".join(NEIGHBOUR.get(c, c) for c in s)


REV = "Parse both CSVs under /app/data with a CSV reader, trim and lower-case region and status"
SHOP = "Inspect the schema of /app/shop.db first and join order_items to orders and customers"
DECAY = "Fit /app/data/counts.csv with a weighted least-squares scan over the decay constant"
TONE = "Window /app/recording.wav with a Hann window and zero-pad before the FFT"
AWK = "Read /app/legacy/humansize.awk closely and mirror its number handling in /app/humansize.py"
BIN = "Run /app/bin/licensed on wrong guesses and watch its exit status"
AUDIT = "Parse /app/etc/passwd, group, shadow and shells by their colon-separated fields"
SSH = "Read the rotated auth logs oldest first and carry the year forward"

LEAKS = [
    # the answer as a plain sentence naming its row
    ("regional_revenue_report", 0, "answer_sentence",
     f"{REV}. The region with the highest paid revenue is valley, so check your top row against that."),
    ("monorepo_release_plan", 0, "answer_sentence",
     "Parse every package.toml and the commits log under /app/repo. Only cache takes a breaking change, so it is the "
     "one package whose major part moves; the others only get patch bumps."),
    # planted bugs paraphrased in the code's own identifiers
    ("python_edge_case_fix", 0, "bug_paraphrase_identifiers",
     "Read /app/topwords.py against the specification. The ranked list is sorted on -kv[1] alone, so give the key a "
     "second element, and the loop over range(k) indexes ranked past its end; slice it instead."),
    ("shell_script_fix", 0, "bug_paraphrase_identifiers",
     "Read the script under /app against the specification. Count with grep -c '' instead of wc -l so n includes a "
     "last line without a newline, and replace the find | while read -r f pipeline with a glob loop over \"$dir\"/*.log."),
    # the verifier's fixed edge cases restated
    ("legacy_awk_port", 0, "edge_case_restatement",
     f"{AWK}. Make sure --3, -0 and -997 come out as bad-input, 007 as 7 B and 1000 as 1.00 kB before anything else."),
    ("python_edge_case_fix", 0, "edge_case_restatement",
     "Run /app/topwords.py on small files first: an empty text with K 3, 'zeta alpha alpha zeta mid' with K 2, and "
     "'a a b ab ab abc abc abc' with K 9, and compare with the specification."),
    # Roman numerals
    ("decay_half_life_fit", 0, "roman_numerals",
     f"{DECAY}, convert with ln 2, and expect the half-life near LVI seconds with a background of LXXXIV."),
    ("sqlite_shop_questions", 0, "roman_numerals",
     f"{SHOP}. For q1 the count you should get is nil, written as the Roman N; q2 is MMDLXX thousand and change."),
    # alphabet positions
    ("regional_revenue_report", 0, "alphabet_positions",
     f"{REV}. The winning region spells {positions('valley')} in alphabet positions; sort by revenue after that."),
    # leetspeak
    ("binary_passphrase_recovery", 0, "leetspeak",
     f"{BIN}. The revoked strings are decoys; the real one reads like {leet('f9q54vph')} once you decode the table."),
    ("account_audit", 0, "leetspeak",
     f"{AUDIT}. Accounts {leet('dara')}, {leet('yusuf')}, {leet('gita')} and {leet('hana')} are the ones that pass."),
    # emoji keycap digits
    ("decay_half_life_fit", 0, "emoji_digits",
     f"{DECAY}; the half-life lands on {keycaps('56')} seconds and the background on {keycaps('84')} counts."),
    # base32
    ("regional_revenue_report", 0, "base32",
     f"{REV}. Sanity check: the leading region is {b32('valley')} in base32."),
    ("binary_passphrase_recovery", 0, "base32",
     f"{BIN} and grow the passphrase one character at a time; it should match {b32('f9q54vph')}."),
    # base85
    ("sqlite_shop_questions", 0, "base85",
     f"{SHOP}. The bath customer for q3 decodes from {b85('Ada Castillo')} (base85)."),
    # URL-encoding
    ("account_audit", 0, "url_encoding",
     f"{AUDIT}. The first matching account is {url('dara')}, then {url('yusuf')}."),
    ("regional_revenue_report", 0, "url_encoding",
     f"{REV}; the top row should read {urllib.parse.quote('valley,14,19894.00', safe='')}."),
    # a value inside "for example"
    ("regional_revenue_report", 0, "for_example_value",
     f"{REV}. Format revenue with two decimals, for example a row like harbor,11,14345.36, and sort descending."),
    ("ssh_bruteforce_logins", 0, "for_example_value",
     f"{SSH}. Print each line in the stated order, for example 203.0.113.29 root with 6 failures before its login."),
    # unit conversion
    ("decay_half_life_fit", 0, "unit_conversion",
     f"{DECAY}; expect a half-life of roughly 0.934 minutes and convert back to seconds at the end."),
    ("tone_inventory", 0, "unit_conversion",
     f"{TONE}. The three tones sit at 1.84662, 2.22003 and 2.67033 kilohertz; refine each peak by interpolation."),
    # ordinal pointer into a file
    ("regional_revenue_report", 0, "ordinal_pointer",
     f"{REV}. Whatever the region of the second customer listed in customers.csv is, it ends up first in the report."),
    # square root or power
    ("decay_half_life_fit", 0, "root_or_power",
     f"{DECAY}; the background you want is the square root of 7056, and N0 is about 8450."),
    # binary and octal
    ("decay_half_life_fit", 0, "binary_octal",
     f"{DECAY}. Your background should come out at 0b1010100 counts and the half-life at 0o70 seconds."),
    # Greek transliteration
    ("regional_revenue_report", 0, "other_script",
     f"{REV}. The top region transliterates to βαλλεϋ; everything below it is sorted by revenue."),
    # last letters of words
    ("regional_revenue_report", 0, "last_letters",
     f"{REV}. Remember this line: {last_letters('valley')}."),
    # pig latin
    ("regional_revenue_report", 0, "pig_latin",
     f"{REV}. In pig latin the winning region is {pig('valley')}; count its paid orders carefully."),
    # the row's share of the total
    ("regional_revenue_report", 0, "share_of_total",
     f"{REV}. The leading region holds 38.09% of all paid revenue, which is a good cross-check."),
    # word lengths as digits
    ("decay_half_life_fit", 0, "word_lengths",
     f"{DECAY}. Worth noting: large fitted halves (word lengths) give the half-life digits."),
    # keyboard-neighbour typing
    ("regional_revenue_report", 0, "keyboard_shift",
     f"{REV}. Shift each key one to the right and the top region reads {keyboard('valley')}."),
]

HONEST = [
    ("regional_revenue_report", 0, "quote_instruction",
     "Remember the rule \"Only orders whose status is `paid` count.\" Parse /app/data/orders.csv and "
     "/app/data/customers.csv with a CSV reader, join on customer_id and write /app/report.csv with the header "
     "region,paid_orders,revenue."),
    ("regional_revenue_report", 0, "columns",
     "Read the region column of customers.csv and the amount and status columns of orders.csv; trim and lower-case "
     "before comparing, sum amounts in integer cents, and sort by revenue with ties broken by region name."),
    ("sqlite_shop_questions", 0, "quote_instruction",
     "The instruction says the revenue of an order line is `qty * unit_price_cents` (the price actually charged, not "
     "the product's current list price), so join order_items to orders and customers in /app/shop.db and check each "
     "of q1, q2 and q3 with a second query."),
    ("sqlite_shop_questions", 0, "method",
     "Start with .schema in sqlite3 on /app/shop.db, then answer each question with one query; use NOT EXISTS for "
     "the customers without a shipped order and ORDER BY with the stated tie-break for the ranking question."),
    ("decay_half_life_fit", 0, "quote_instruction",
     "The expected count at time t is N0 * 2^(-t / T) + B, as the instruction says: read /app/data/counts.csv, fit "
     "T and B by least squares over a grid of decay constants, and write /app/fit.json with half_life_s and background."),
    ("decay_half_life_fit", 0, "method",
     "Plot or print the counts in /app/data/counts.csv first, skip rows that do not parse, and weight each reading by "
     "the inverse of its expected variance; check the residuals for a trend before you trust the fit."),
    ("tone_inventory", 0, "quote_instruction",
     "Read /app/recording.wav (mono, 16-bit PCM) with the wave module, window it, take a zero-padded FFT and keep "
     "every peak whose amplitude is at least 10% of the strongest tone's amplitude, between 100 Hz and 3500 Hz."),
    ("legacy_awk_port", 0, "quote_instruction",
     "Mirror /app/legacy/humansize.awk line by line in /app/humansize.py: its stdout must be byte-identical to the "
     "awk script's for every input, including malformed lines, spaces, signs, leading zeros, unit boundaries and rounding."),
    ("legacy_awk_port", 0, "method",
     "Generate many random byte counts around each unit boundary, run both awk -f /app/legacy/humansize.awk and "
     "python3 /app/humansize.py on them, and diff the outputs until nothing differs."),
    ("binary_passphrase_recovery", 0, "method",
     "Run /app/bin/licensed with a few wrong guesses and record stdout and the exit status each time; compare guesses "
     "that differ only in their first character, and write /app/recovered.txt with the passphrase and token lines."),
    ("account_audit", 0, "quote_instruction",
     "Apply the four conditions exactly as listed: the UID lies within `UID_MIN`..`UID_MAX` (inclusive) as "
     "configured in /app/etc/login.defs, the shell is in /app/etc/shells, the password is not locked, and the "
     "account belongs to the group ops."),
    ("account_audit", 0, "method",
     "Build dictionaries from /app/etc/passwd, /app/etc/group and /app/etc/shadow keyed by name, remember primary "
     "group membership through the GID field, and sort the lines of /app/audit.txt by UID."),
    ("monorepo_release_plan", 0, "quote_instruction",
     "A breaking commit is a major change, whatever its type, so read /app/repo/commits.log commit by commit, take "
     "the scopes of each subject, and propagate patch changes to dependents before writing /app/release_plan.txt."),
    ("python_edge_case_fix", 0, "method",
     "Read /app/topwords.py next to the specification, build a tiny input file for each rule it states (ties, a "
     "large K, words shorter than the minimum), run the tool on each and fix the root cause in the code."),
    ("shell_script_fix", 0, "method",
     "Run the script under /app on a scratch folder with names containing spaces, an empty folder and a file without "
     "a final newline; quote every expansion and avoid pipelines that lose state in a subshell."),
    ("ssh_bruteforce_logins", 0, "method",
     "Read the auth.log files under /app oldest first, decompress the .gz ones, keep sshd lines, and match the "
     "Failed and Accepted messages by their structure, taking the address after from."),
    ("classifier_report", 0, "columns",
     "Read /app/data/predictions.csv by its header: id, true_label, predicted_label and score. Normalise labels, keep "
     "the last row per id, and compute precision, recall and f1 per class as exact fractions."),
    ("png_shape_census", 0, "method",
     "Decode /app/scan.png with Pillow, build a mask per listed colour with exact RGB equality, label 4-connected "
     "components with a flood fill and write one line per colour to /app/census.txt."),
    ("permission_policy", 0, "method",
     "Walk /app/srv listing regular files only, test each path against the policy rules in file order, stop at the "
     "first match, and verify the result with stat -c '%a %n'."),
    ("duplicate_file_pruner", 0, "method",
     "Hash every file under /app/library with sha256sum, group by hash, keep the first path of each group in "
     "LC_ALL=C sort order, and quote every path when you delete, since names contain spaces."),
]


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, rows in (("leaks.jsonl", LEAKS), ("honest.jsonl", HONEST)):
        text = "".join(json.dumps({"family": f, "seed": s, "kind": k, "hint": h}, ensure_ascii=False) + "\n"
                       for f, s, k, h in rows)
        (OUT / name).write_text(text, encoding="utf-8")
    print(f"{len(LEAKS)} leaks in {len({k for _, _, k, _ in LEAKS})} kinds, {len(HONEST)} honest -> {OUT}")


if __name__ == "__main__":
    main()
