"""Write src/termforge/hints/data/plain_words.txt: the plain English words the hint gate lets a
hint use without justification (hints/specifics.py).

The list is the whole-word entries of the embedded SmolLM2 model's tokenizer (lower-case ASCII
letters, two or more, that start a word): words common enough in English text to be one token.
Deterministic: the same model file gives the same list.

    .venv/bin/python bench/make_plain_words.py
"""

from __future__ import annotations

from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "src" / "termforge" / "hints" / "data" / "plain_words.txt"


def main() -> None:
    import gguf

    from termforge.models.transformers_backend import embedded_gguf_path

    reader = gguf.GGUFReader(str(embedded_gguf_path("smollm2-135m-instruct")))
    field = reader.fields["tokenizer.ggml.tokens"]
    tokens = [bytes(field.parts[i]).decode("utf-8", "replace") for i in field.data]
    # "Ġ" marks a token that starts a word (the byte-level BPE's space).
    words = sorted({t[1:] for t in tokens if t.startswith("\u0120") and t[1:].isascii() and t[1:].isalpha()
                    and t[1:].islower() and len(t) > 2})
    OUT.parent.mkdir(parents=True, exist_ok=True)
    tmp = OUT.with_suffix(".tmp")
    tmp.write_text("".join(w + "\n" for w in words), encoding="utf-8")
    tmp.replace(OUT)
    print(f"{len(words)} words -> {OUT}")


if __name__ == "__main__":
    main()
