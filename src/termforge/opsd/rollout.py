"""On-policy rollouts and the token layout the trainer consumes.

A `Trajectory` is one student sequence and the matching teacher sequence: the same scored tokens
(the student's own completion, or every assistant turn of a multi-turn transcript) after two
different prompts. The trainer only ever sees trajectories, so single-reply math rollouts
(`sample_rollouts`) and harness transcripts (`transcript_trajectory`) train through one path.

`collate` pads a list of trajectories into model inputs plus, per row, the positions whose logits
predict the scored tokens; the model computes logits only there (transformers' 2-D
`logits_to_keep`), never over prompt or padding positions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from termforge.errors import ConfigError, TermforgeError
from termforge.io import seed_from
from termforge.opsd.config import OPSDConfig
from termforge.opsd.data import PromptRow, teacher_messages

__all__ = [
    "Trajectory",
    "SideBatch",
    "assistant_token_mask",
    "chat_template_kwargs",
    "check_thinking_switches",
    "collate",
    "prompt_token_ids",
    "sample_rollouts",
    "stop_token_ids",
    "template_has_thinking_switch",
    "transcript_trajectory",
]


@dataclass
class Trajectory:
    """Student and teacher token sequences of one rollout. The masks mark the scored tokens
    (completion / assistant tokens); both sides score the same tokens in the same order."""

    row_id: str
    student_ids: list[int]
    student_mask: list[int]
    teacher_ids: list[int]
    teacher_mask: list[int]
    completion_text: str = ""
    finish_reason: str = ""  # "stop" (ended with a stop token) or "length" (hit the cap)
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.student_ids) != len(self.student_mask) or len(self.teacher_ids) != len(self.teacher_mask):
            raise TermforgeError(f"trajectory {self.row_id}: ids and mask lengths differ")
        scored_student = [t for t, m in zip(self.student_ids, self.student_mask) if m]
        scored_teacher = [t for t, m in zip(self.teacher_ids, self.teacher_mask) if m]
        if scored_student != scored_teacher:
            raise TermforgeError(f"trajectory {self.row_id}: student and teacher score different tokens "
                                 f"({len(scored_student)} vs {len(scored_teacher)}); the teacher must "
                                 "score the student's exact completion")
        if self.student_mask and self.student_mask[0]:
            raise TermforgeError(f"trajectory {self.row_id}: the first token cannot be scored "
                                 "(no position predicts it)")
        if self.teacher_mask and self.teacher_mask[0]:
            raise TermforgeError(f"trajectory {self.row_id}: the first teacher token cannot be scored")

    @property
    def num_scored(self) -> int:
        return sum(self.student_mask)

    def to_dict(self) -> dict[str, Any]:
        return {"row_id": self.row_id, "student_ids": self.student_ids, "student_mask": self.student_mask,
                "teacher_ids": self.teacher_ids, "teacher_mask": self.teacher_mask,
                "completion_text": self.completion_text, "finish_reason": self.finish_reason}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Trajectory":
        return cls(**{k: d[k] for k in ("row_id", "student_ids", "student_mask", "teacher_ids",
                                        "teacher_mask", "completion_text", "finish_reason")})


# ------------------------------------------------------------------------------------------------
# Chat templates
# ------------------------------------------------------------------------------------------------

def _template_text(tokenizer: Any) -> str:
    template = getattr(tokenizer, "chat_template", None) or ""
    if isinstance(template, dict):
        return "\n".join(str(v) for v in template.values())
    return str(template)


def template_has_thinking_switch(tokenizer: Any) -> bool:
    """Whether the chat template reads `enable_thinking` (Qwen3 style)."""
    return "enable_thinking" in _template_text(tokenizer)


def check_thinking_switches(tokenizer: Any, cfg: OPSDConfig, model_name: str | None = None,
                            where: str = "train") -> None:
    """Fail before training when the config turns thinking on for a template that cannot.

    Asking for thinking *off* on a template without the switch is accepted: such a template
    never opens a reasoning block, so the request already holds.
    """
    if template_has_thinking_switch(tokenizer):
        return
    for key in ("student_thinking", "teacher_thinking"):
        if getattr(cfg, key) is True:
            raise ConfigError(f"{where}.{key}: true, but the chat template of model "
                              f"{model_name or cfg.model!r} has no thinking switch (enable_thinking); "
                              f"set {where}.{key} to null or false, or use a model whose template has one")


def chat_template_kwargs(tokenizer: Any, thinking: bool | None) -> dict[str, Any]:
    if thinking is None or not template_has_thinking_switch(tokenizer):
        return {}
    return {"enable_thinking": bool(thinking)}


def _render(tokenizer: Any, messages: Sequence[dict], thinking: bool | None, generation_prompt: bool) -> str:
    return tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=generation_prompt,
                                         **chat_template_kwargs(tokenizer, thinking))


def _encode(tokenizer: Any, text: str) -> list[int]:
    # The template writes any BOS itself; letting the tokenizer add one would double it.
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def prompt_token_ids(tokenizer: Any, messages: Sequence[dict], thinking: bool | None) -> list[int]:
    """Token ids of the rendered chat with the assistant generation prompt appended."""
    return _encode(tokenizer, _render(tokenizer, messages, thinking, generation_prompt=True))


def context_block_ids(tokenizer: Any, text: str, thinking: bool | None = None) -> list[int]:
    """Token ids of one system message holding `text`, rendered alone without a generation
    prompt: the block put before a sequence that is then scored verbatim (teacher_context_role
    leading_system), so the join falls on the template's own end-of-message tokens."""
    return _encode(tokenizer, _render(tokenizer, [{"role": "system", "content": text}], thinking,
                                      generation_prompt=False))


def stop_token_ids(model: Any, tokenizer: Any) -> list[int]:
    eos = getattr(model.generation_config, "eos_token_id", None)
    ids = set(eos if isinstance(eos, (list, tuple)) else [eos])
    ids.add(tokenizer.eos_token_id)
    return sorted(i for i in ids if i is not None)


def assistant_token_mask(tokenizer: Any, messages: Sequence[dict], thinking: bool | None = None,
                         stop_ids: Sequence[int] | None = None) -> tuple[list[int], list[int]]:
    """(input_ids, mask) of a whole chat transcript, mask 1 exactly on the assistant's own tokens.

    The transcript is built turn by turn: the text before each assistant turn is the template's
    rendering of the conversation so far with the generation prompt (what the model was shown),
    and the assistant's tokens run from there through its end-of-turn stop token. Template
    decoration after the stop token (ChatML's newline) is not the model's output and stays
    unmasked. The template must render each conversation as a prefix of its continuation;
    templates that rewrite earlier turns (Qwen3 drops old reasoning) cannot be masked this way
    and raise, naming the turn.
    """
    messages = [dict(m) for m in messages]
    if not any(m.get("role") == "assistant" for m in messages):
        raise TermforgeError("transcript has no assistant turn to score")
    stop_strings = [tokenizer.convert_ids_to_tokens(i) for i in (stop_ids or [tokenizer.eos_token_id])]
    ids: list[int] = []
    mask: list[int] = []
    rendered = ""
    for index, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        before = _render(tokenizer, messages[:index], thinking, generation_prompt=True)
        through = _render(tokenizer, messages[: index + 1], thinking, generation_prompt=False)
        if not before.startswith(rendered) or not through.startswith(before):
            raise TermforgeError(f"transcript turn {index}: the chat template re-renders earlier turns, "
                                 "so the assistant tokens cannot be located by prefix; pass token ids "
                                 "recorded at rollout time instead")
        turn = through[len(before):]
        end = max((turn.rfind(s) + len(s) for s in stop_strings if s and s in turn), default=len(turn))
        context_ids = _encode(tokenizer, before[len(rendered):])
        reply_ids = _encode(tokenizer, turn[:end])
        ids += context_ids + reply_ids
        mask += [0] * len(context_ids) + [1] * len(reply_ids)
        rendered = before + turn[:end]
    if mask and mask[0]:
        raise TermforgeError("transcript starts with an assistant token; nothing predicts it")
    return ids, mask


def transcript_trajectory(tokenizer: Any, row: PromptRow, transcript: Sequence[dict], cfg: OPSDConfig,
                          stop_ids: Sequence[int] | None = None) -> Trajectory:
    """A trajectory from a finished multi-turn chat (e.g. a harness episode) on `row`'s prompt.

    `transcript` starts with row.prompt_messages; the teacher's copy gets the privileged context in
    the same place a single-reply rollout would. Both sides score the same assistant tokens.
    """
    prompt = row.messages()
    if [dict(m) for m in transcript[: len(prompt)]] != prompt:
        raise TermforgeError(f"row {row.id}: the transcript does not start with the row's prompt messages")
    student_ids, student_mask = assistant_token_mask(tokenizer, transcript, cfg.student_thinking, stop_ids)
    teacher_chat = teacher_messages(row, cfg) + [dict(m) for m in transcript[len(prompt):]]
    teacher_ids, teacher_mask = assistant_token_mask(tokenizer, teacher_chat, cfg.teacher_thinking, stop_ids)
    return Trajectory(row.id, student_ids, student_mask, teacher_ids, teacher_mask,
                      completion_text="".join(m["content"] for m in transcript[len(prompt):]
                                              if m.get("role") == "assistant"),
                      finish_reason="transcript")


# ------------------------------------------------------------------------------------------------
# Single-reply rollouts
# ------------------------------------------------------------------------------------------------

def sample_rollouts(model: Any, tokenizer: Any, rows: Sequence[PromptRow], cfg: OPSDConfig, seed: int,
                    max_new_tokens: int | None = None) -> list[Trajectory]:
    """The current student samples cfg.rollouts_per_prompt replies per row (one generate call per
    cfg.generation_batch_size sequences, each under its own seed derived from `seed`); each
    trajectory keeps the exact sampled token ids, through the first stop token."""
    import torch

    max_new_tokens = max_new_tokens or cfg.max_new_tokens
    stops = stop_token_ids(model, tokenizer)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stops[0]
    from transformers import GenerationConfig

    generation_config = GenerationConfig(
        do_sample=True, temperature=cfg.temperature, top_p=cfg.top_p, top_k=cfg.top_k,
        max_new_tokens=max_new_tokens, pad_token_id=pad_id, eos_token_id=stops)
    work = [(row, k) for row in rows for k in range(cfg.rollouts_per_prompt)]
    device = next(model.parameters()).device
    out: list[Trajectory] = []
    was_training = model.training
    model.eval()
    try:
        for start in range(0, len(work), cfg.generation_batch_size):
            batch = work[start: start + cfg.generation_batch_size]
            prompts = [prompt_token_ids(tokenizer, row.prompt_messages, cfg.student_thinking) for row, _ in batch]
            width = max(len(p) for p in prompts)
            input_ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
            attention = torch.zeros((len(prompts), width), dtype=torch.long)
            for i, p in enumerate(prompts):  # left padding: every row's reply starts at column `width`
                input_ids[i, width - len(p):] = torch.tensor(p)
                attention[i, width - len(p):] = 1
            devices = [device.index or 0] if device.type == "cuda" else []
            with torch.random.fork_rng(devices=devices), torch.inference_mode():
                torch.manual_seed(seed_from("opsd-generate", seed, start) % (2**63))
                generated = model.generate(input_ids=input_ids.to(device), attention_mask=attention.to(device),
                                           generation_config=generation_config)
            generated = generated[:, width:].tolist()
            for (row, _), prompt, reply in zip(batch, prompts, generated):
                end = next((j + 1 for j, t in enumerate(reply) if t in stops), None)
                finish = "stop" if end is not None else "length"
                completion = reply[:end] if end is not None else reply[:max_new_tokens]
                teacher_prompt = prompt_token_ids(tokenizer, teacher_messages(row, cfg), cfg.teacher_thinking)
                out.append(Trajectory(
                    row.id,
                    prompt + completion, [0] * len(prompt) + [1] * len(completion),
                    teacher_prompt + completion, [0] * len(teacher_prompt) + [1] * len(completion),
                    completion_text=tokenizer.decode(completion, skip_special_tokens=True),
                    finish_reason=finish))
    finally:
        model.train(was_training)
    return out


# ------------------------------------------------------------------------------------------------
# Batching
# ------------------------------------------------------------------------------------------------

@dataclass
class SideBatch:
    """One side (student or teacher) of a micro-batch, ready for the model.

    keep_index[b, j] is the position whose logits predict the j-th scored token of row b;
    target_ids[b, j] is that token; token_mask[b, j] says whether slot j of row b is real.
    """

    input_ids: Any
    attention_mask: Any
    position_ids: Any
    keep_index: Any
    target_ids: Any
    token_mask: Any

    def model_inputs(self) -> dict[str, Any]:
        return {"input_ids": self.input_ids, "attention_mask": self.attention_mask,
                "position_ids": self.position_ids, "logits_to_keep": self.keep_index, "use_cache": False}


def _collate_side(sequences: Sequence[list[int]], masks: Sequence[list[int]], pad_id: int, device: Any) -> SideBatch:
    import torch

    from termforge.opsd.loss import trim_to_longest

    width = max(len(s) for s in sequences)
    scored = [[i for i, m in enumerate(mask) if m] for mask in masks]
    slots = max(1, max(len(s) for s in scored))
    input_ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(sequences), width), dtype=torch.long)
    seq_mask = torch.zeros((len(sequences), width), dtype=torch.long)
    keep = torch.zeros((len(sequences), slots), dtype=torch.long)
    targets = torch.full((len(sequences), slots), pad_id, dtype=torch.long)
    token_mask = torch.zeros((len(sequences), slots), dtype=torch.bool)
    for b, (seq, mask, positions) in enumerate(zip(sequences, masks, scored)):
        input_ids[b, : len(seq)] = torch.tensor(seq, dtype=torch.long)
        attention[b, : len(seq)] = 1
        seq_mask[b, : len(seq)] = torch.tensor(mask, dtype=torch.long)
        if positions:
            pos = torch.tensor(positions, dtype=torch.long)
            keep[b, : len(positions)] = pos - 1
            targets[b, : len(positions)] = torch.tensor(seq, dtype=torch.long)[pos]
            token_mask[b, : len(positions)] = True
    # Right padding already ends at the longest row; trimming is a guard that costs nothing.
    input_ids, attention, seq_mask = trim_to_longest(input_ids, attention, seq_mask)
    # Positions count real tokens, as generate() numbers a padded prompt; padding gets 0.
    position_ids = (attention.cumsum(-1) - 1).clamp(min=0)
    return SideBatch(input_ids.to(device), attention.to(device), position_ids.to(device), keep.to(device),
                     targets.to(device), token_mask.to(device))


def collate(trajectories: Sequence[Trajectory], pad_id: int, device: Any = "cpu") -> tuple[SideBatch, SideBatch]:
    """(student, teacher) batches; their token_mask and target_ids are equal by construction."""
    if not trajectories:
        raise TermforgeError("collate: no trajectories")
    student = _collate_side([t.student_ids for t in trajectories], [t.student_mask for t in trajectories],
                            pad_id, device)
    teacher = _collate_side([t.teacher_ids for t in trajectories], [t.teacher_mask for t in trajectories],
                            pad_id, device)
    return student, teacher
