"""OPSDConfig: every knob of the on-policy self-distillation trainer, in one dataclass.

One flat dataclass in the style of TRL's trainer configs: each field has a default and a help
text (``field(metadata={"help": ...})``), and the same table gives the JSON schema of the
``train:`` section of config.yaml (``config_schema()``). The defaults are the embedded run
(SmolLM2-135M on two CPU cores, a few minutes); configs/opsd-reference.yaml holds the reference
recipe (Qwen3-1.7B), and docs/opsd.md maps one onto the other.

``OPSDConfig.from_dict`` is the only way in from user input: unknown keys, wrong types, values
out of range and contradictory combinations raise ConfigError naming the key path.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Mapping

from termforge.errors import ConfigError

__all__ = [
    "OPSDConfig",
    "PROMPT_PRESETS",
    "REFERENCE_STUDENT_TEMPLATE",
    "REFERENCE_TARGET_MODULES",
    "REFERENCE_TEACHER_TEMPLATE",
    "RESUME_FREE_KEYS",
    "config_schema",
    "incompatible_keys",
]

REFERENCE_TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

DEFAULT_MATH_CONTEXT_TEMPLATE = (
    "Below is a problem together with a worked reference solution. Read the solution, then write "
    "your own solution to the problem.\n\nReference solution:\n{context}\n\n"
)
DEFAULT_TERMINAL_CONTEXT_TEMPLATE = (
    "Guidance on how to approach the task below (a method, not the answer):\n{context}\n\n"
)

# The reference recipe's prompts, in this project's words. What is carried over is the structure
# and its order (zhaoruizhi/OPSD-main data_collator.py: the student message in __call__, the teacher
# message in build_reference_teacher_user_message with the transition_prompt set in __init__):
# student = labelled problem, then the step-by-step / boxed instruction; teacher = labelled problem,
# the solution between begin/end markers, an instruction to understand it but derive the answer
# independently (not copy it), then the same step-by-step / boxed instruction. Each is one user
# message. The exact published wording is set with student_template / teacher_template (docs/opsd.md).
REFERENCE_STUDENT_TEMPLATE = (
    "Problem: {problem}\n\n"
    "Reason through it one step at a time and write the final answer inside \\boxed{{}}."
)
REFERENCE_TEACHER_TEMPLATE = (
    "Problem: {problem}\n\n"
    "A worked solution to this problem follows.\n"
    "--- BEGIN REFERENCE SOLUTION ---\n{solution}\n--- END REFERENCE SOLUTION ---\n\n"
    "Make sure you understand why each step of that solution holds, but do not reuse or reword it. "
    "Solve the problem again on your own, in your own words, and reach the same final answer: think "
    "step by step, try another route when one fails, and go back to fix anything that does not hold.\n\n"
    "Reason through it one step at a time and write the final answer inside \\boxed{{}}."
)
# preset -> (student template, teacher template); None keeps termforge's own prompts: the AIME eval
# prompt (math) or the harness's opening turns (terminal) for the student, the context template
# placed per teacher_context_role for the teacher.
PROMPT_PRESETS: dict[str, tuple[str | None, str | None]] = {
    "termforge": (None, None),
    "reference": (REFERENCE_STUDENT_TEMPLATE, REFERENCE_TEACHER_TEMPLATE),
}


def _knob(default: Any, help: str, *, choices: tuple | None = None, minimum: float | None = None,
          exclusive_minimum: float | None = None, maximum: float | None = None,
          default_factory: Any = None) -> Any:
    metadata = {"help": help, "choices": choices, "minimum": minimum,
                "exclusive_minimum": exclusive_minimum, "maximum": maximum}
    if default_factory is not None:
        return field(default_factory=default_factory, metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass(frozen=True)
class OPSDConfig:
    # -- model and precision ----------------------------------------------------------------
    model: str = _knob("smollm2-135m-instruct", "Student model (the teacher is the same model): the "
                       "embedded name smollm2-135m-instruct, a local directory or .gguf file, or a Hub id.")
    device: str = _knob("auto", "cpu, cuda, cuda:N or auto (GPU when one is visible). Under "
                        "`accelerate launch` the launcher's device wins.")
    dtype: str = _knob("auto", "Weight dtype. auto: bfloat16 for a frozen LoRA base on a GPU, float32 "
                       "otherwise (full fine-tuning keeps float32 master weights and gets bf16 compute "
                       "from mixed_precision).", choices=("auto", "float32", "bfloat16", "float16"))
    mixed_precision: str = _knob("auto", "Autocast for forward passes: auto (bf16 on GPU, off on CPU), "
                                 "no or bf16.", choices=("auto", "no", "bf16"))
    num_threads: int | None = _knob(None, "CPU threads for torch (null: the CPUs this job is allotted: its CPU "
                                    "affinity, cgroup quota and the workflow's threads for the rule, split over "
                                    "the job's processes on the node; termforge.cpu_budget).", minimum=1)

    # -- data -------------------------------------------------------------------------------
    data_kind: str = _knob("math", "math: problems whose privileged context is the reference solution; "
                           "terminal: kept tasks whose privileged context is the hint (demos.parquet).",
                           choices=("math", "terminal"))
    dataset: str | None = _knob(None, "Math data: a Hub id (e.g. siyanzhao/Openthoughts_math_30k_opsd) or a "
                                "local .jsonl/.json/.parquet file or dataset folder.")
    dataset_split: str = _knob("train", "Split to read from a Hub or folder dataset.")
    # Column names default to siyanzhao/Openthoughts_math_30k_opsd's as the reference code reads
    # them: problem and solution (OPSD-main data_collator.py), Answer (grpo_train.py on the same set),
    # generated_token_count (eval/quick_opsd_common.py).
    problem_column: str = _knob("problem", "Column holding the problem text.")
    solution_column: str = _knob("solution", "Column holding the reference solution (the teacher's "
                                 "privileged context), used as it is, whitespace included.")
    answer_column: str | None = _knob("Answer", "Column holding the final answer (the OpenThoughts OPSD set's "
                                      "Answer), read only when answer_filter or drop_empty_answers is on; "
                                      "null takes it from the last \\boxed{} of the solution.")
    id_column: str | None = _knob(None, "Column holding a row id; null numbers rows by position.")
    answer_filter: bool = _knob(False, "Keep only rows whose answer string, stripped of surrounding whitespace "
                                "and otherwise as stored (not normalised), matches answer_pattern in full (the "
                                "tuning trace's filter).")
    answer_pattern: str = _knob(r"-?\d{1,6}", "Regular expression (Python re, full match) that answer_filter "
                                "applies to the whitespace-stripped answer string; the default is the tuning "
                                "trace's: an optional minus sign and 1 to 6 digits, nothing else.")
    drop_empty_answers: bool = _knob(False, "Drop rows whose answer is empty or whitespace. Off: every row "
                                     "trains, as in the reference (OPSD training never reads the answer).")
    min_solution_chars: int = _knob(0, "Drop rows whose solution is shorter than this.", minimum=0)
    min_generated_tokens: int = _knob(0, "Keep only rows whose reference generation is at least this many "
                                      "tokens long, read from generated_tokens_column (0: no filter; rows "
                                      "without a count are dropped when it is set).", minimum=0)
    generated_tokens_column: str = _knob("generated_token_count", "Column holding the length in tokens of "
                                         "the row's reference generation (read only when "
                                         "min_generated_tokens is set).")
    max_rows: int | None = _knob(None, "Use at most this many rows (the first ones after filtering).",
                                 minimum=1)
    demos: str | None = _knob(None, "Terminal data: demos.parquet from the hints stage (task_id, demo).")
    tasks_dir: str | None = _knob(None, "Terminal data: folder of task directories (each with "
                                  "instruction.md), joined with demos on task id.")
    max_prompt_tokens: int | None = _knob(None, "Drop rows whose teacher prompt (prompt plus privileged "
                                          "context) is longer than this many tokens.", minimum=1)
    probe_dataset: str | None = _knob(None, "Held-out rows for the KL probe (same columns as dataset); "
                                      "null: hold probe_size rows out of the training data.")
    probe_size: int = _knob(4, "Held-out prompts in the KL probe (0 disables the probe).", minimum=0)
    probe_max_new_tokens: int = _knob(32, "Length cap of the probe's fixed completions.", minimum=1)

    # -- prompts ----------------------------------------------------------------------------
    student_thinking: bool | None = _knob(None, "enable_thinking for the student's chat template "
                                          "(null: the template's default, no switch passed). true on a "
                                          "template without the switch is an error.")
    teacher_thinking: bool | None = _knob(None, "enable_thinking for the teacher's chat template "
                                          "(null: the template's default).")
    teacher_context_role: str = _knob("user", "Where the privileged context goes in the teacher prompt: "
                                      "prepended to the first user message, or into the system message; "
                                      "leading_system (terminal data): a system message of its own, rendered "
                                      "alone and put before the student's exact token stream, which follows "
                                      "verbatim (prime-rl's opsd placement).",
                                      choices=("user", "system", "leading_system"))
    math_context_template: str = _knob(DEFAULT_MATH_CONTEXT_TEMPLATE, "Teacher text for math rows; "
                                       "{context} is replaced by the reference solution.")
    terminal_context_template: str = _knob(DEFAULT_TERMINAL_CONTEXT_TEMPLATE, "Teacher text for "
                                           "terminal rows; {context} is replaced by the hint.")
    prompt_preset: str = _knob("termforge", "Prompt set used where student_template / teacher_template are "
                               "null. termforge: the AIME eval prompt (math) or the harness's opening turns "
                               "(terminal) for the student, the context template placed per "
                               "teacher_context_role for the teacher. reference: the reference recipe's "
                               "structure and order in this project's words (math only; docs/opsd.md).",
                               choices=tuple(PROMPT_PRESETS))
    student_template: str | None = _knob(None, "The student's user message, in full; {problem} is replaced by "
                                         "the problem (math) or the instruction (terminal). Other braces "
                                         "are written {{ }}. null: the preset's.")
    teacher_template: str | None = _knob(None, "The teacher's user message, in full, replacing the context "
                                         "template; {problem} as in student_template, and {solution} "
                                         "(math) or {hint} (terminal) for the privileged context. The "
                                         "teacher's prompt defines the distribution the student is "
                                         "pulled towards. null: the preset's.")

    # -- rollouts ---------------------------------------------------------------------------
    prompts_per_step: int = _knob(4, "Prompts per optimizer step, over all processes.", minimum=1)
    rollouts_per_prompt: int = _knob(1, "Student samples per prompt.", minimum=1)
    max_new_tokens: int = _knob(24, "Length cap of a student rollout.", minimum=1)
    temperature: float = _knob(1.1, "Sampling temperature of rollouts.", exclusive_minimum=0.0)
    top_p: float = _knob(0.95, "Nucleus mass of rollouts.", exclusive_minimum=0.0, maximum=1.0)
    top_k: int = _knob(20, "Top-k of rollouts (0 disables).", minimum=0)
    generation_batch_size: int = _knob(8, "Prompts per generate call.", minimum=1)

    # -- teacher ----------------------------------------------------------------------------
    teacher_mode: str = _knob("auto", "fixed: the base weights (LoRA off); ema: an exponential moving "
                              "average of the trained weights; live: the current weights (the policy being "
                              "trained, given the privileged context). auto: live for terminal data (on-policy "
                              "self-distillation as tmax-opsd-v1 and prime-rl's opsd run it), fixed for math "
                              "(the reference recipe).", choices=("auto", "fixed", "ema", "live"))
    ema_decay: float = _knob(0.999, "EMA decay per optimizer step (teacher_mode ema). As in the reference, "
                             "the average starts as a copy of the weights after the first optimizer step "
                             "(the first step's teacher is the current weights) and decays from the second.",
                             minimum=0.0, maximum=1.0)

    # -- loss -------------------------------------------------------------------------------
    loss_type: str = _knob("full_vocab", "full_vocab: generalised JSD over the whole vocabulary; "
                           "sampled_token: the policy-gradient reverse-KL estimate on sampled tokens; ref_kl "
                           "(terminal data): prime-rl's opsd signal, the sampled-token reverse KL to the teacher "
                           "as a per-token advantage with the importance ratio to the sampler, its trust region "
                           "and drift term (docs/opsd.md).",
                           choices=("full_vocab", "sampled_token", "ref_kl"))
    beta: float = _knob(0.0, "Generalised JSD mixture: 0 forward KL(teacher||student), 1 reverse KL.",
                        minimum=0.0, maximum=1.0)
    loss_temperature: float | None = _knob(None, "Temperature both logits are divided by in the loss "
                                           "(null: the sampling temperature).", exclusive_minimum=0.0)
    token_clip: float | None = _knob(0.05, "Clamp each per-(token, vocabulary entry) divergence term at "
                                     "this maximum before summing (null: no clamp).",
                                     exclusive_minimum=0.0)
    loss_reduction: str = _knob("token_mean", "How scored tokens are weighted in a step's loss. token_mean: "
                                "one mean over every scored token of the step, whatever the micro-batch "
                                "split or process count. micro_batch_mean: the reference's, a token mean "
                                "within each micro-batch, then a mean over micro-batches and processes (a "
                                "token in a short micro-batch weighs more; micro_batch_size then changes "
                                "the objective).", choices=("token_mean", "micro_batch_mean"))
    loss_chunk_size: int | None = _knob(256, "Completion tokens per loss chunk (bounded memory, same "
                                        "value); null computes all tokens at once.", minimum=1)

    # -- optimisation -----------------------------------------------------------------------
    finetune: str = _knob("lora", "lora (peft adapters on a frozen base) or full.", choices=("lora", "full"))
    lora_r: int = _knob(8, "LoRA rank.", minimum=1)
    lora_alpha: float = _knob(16.0, "LoRA alpha (scale alpha / r).", exclusive_minimum=0.0)
    lora_dropout: float = _knob(0.0, "Dropout on the LoRA input.", minimum=0.0, maximum=1.0)
    lora_target_modules: list[str] = _knob(None, "Module names that get adapters.",
                                           default_factory=lambda: list(REFERENCE_TARGET_MODULES))
    learning_rate: float = _knob(2e-4, "Peak learning rate (AdamW).", exclusive_minimum=0.0)
    weight_decay: float = _knob(0.0, "AdamW decoupled weight decay.", minimum=0.0)
    adam_beta1: float = _knob(0.9, "AdamW beta1.", minimum=0.0, maximum=1.0)
    adam_beta2: float = _knob(0.999, "AdamW beta2.", minimum=0.0, maximum=1.0)
    adam_epsilon: float = _knob(1e-8, "AdamW epsilon.", exclusive_minimum=0.0)
    lr_scheduler: str = _knob("constant", "Learning-rate schedule after warmup.",
                              choices=("constant", "linear", "cosine"))
    warmup_steps: int = _knob(0, "Linear warmup from 0 over this many steps.", minimum=0)
    max_grad_norm: float | None = _knob(0.1, "Clip the global gradient norm to this (null: no clip).",
                                        exclusive_minimum=0.0)
    max_steps: int = _knob(5, "Optimizer steps.", minimum=1)
    micro_batch_size: int = _knob(4, "Sequences per forward/backward on one process; a step's prompts "
                                  "are accumulated over as many micro-batches as needed.", minimum=1)
    gradient_checkpointing: bool = _knob(False, "Activation checkpointing on the student forward "
                                         "(the teacher forward keeps no activations anyway).")
    seed: int = _knob(0, "Seeds LoRA init, data order, rollouts and dropout.", minimum=0)

    # -- outputs ----------------------------------------------------------------------------
    checkpoint_every: int = _knob(0, "Write a resumable checkpoint every N steps (0: only the last "
                                  "step).", minimum=0)
    checkpoint_keep: int = _knob(2, "Checkpoints kept on disk (older ones are deleted).", minimum=1)
    resume: bool = _knob(True, "Continue from the newest checkpoint in the output folder if there is one.")
    plot: bool = _knob(True, "Write loss_curve.png.")

    # -- terminal episodes, GRPO and mixed batches (data_kind terminal; docs/opsd.md) ---------
    objective: str = _knob("opsd", "opsd: distil the hinted teacher into the student's own episodes; grpo: "
                           "policy gradient on the verifier's binary reward; mixed: one batch with a GRPO "
                           "part over the RL pool and an OPSD part over hinted tasks (terminal data only "
                           "for grpo and mixed).", choices=("opsd", "grpo", "mixed"))
    group_size: int = _knob(4, "GRPO: episodes per task (one group); TMax uses 32.", minimum=2)
    rl_loss: str = _knob("dppo", "GRPO loss: ppo_clip (clipped surrogate, clip_low/clip_high) or dppo "
                         "(TMax: unclipped surrogate, tokens masked outside a binary total-variation trust "
                         "region).", choices=("ppo_clip", "dppo"))
    clip_low: float = _knob(0.2, "ppo_clip: lower clip range (ratio >= 1 - clip_low).", minimum=0.0, maximum=1.0)
    clip_high: float = _knob(0.272, "ppo_clip: upper clip range (ratio <= 1 + clip_high); above clip_low "
                             "is DAPO's clip-higher (TMax: 0.272).", minimum=0.0)
    dppo_threshold: float = _knob(0.1, "dppo: binary TV threshold of the trust region (TMax: 0.1).",
                                  exclusive_minimum=0.0, maximum=1.0)
    advantage: str = _knob("centered", "GRPO advantages: centered (r - group mean, TMax) or std (divided by "
                           "the group's std + 1e-8, GRPO).", choices=("centered", "std"))
    pg_reduction: str = _knob("token", "GRPO normalisation: token (every scored token of the part weighs "
                              "the same, so long episodes are not down-weighted; TMax's default) or sequence "
                              "(token-mean per episode, then mean over episodes).",
                              choices=("token", "sequence"))
    kl_coef: float = _knob(0.0, "GRPO: weight of the k3 KL(policy || base) term (TMax: 0); the base is "
                           "the weights with LoRA off (full fine-tuning keeps a copy only with teacher_mode "
                           "fixed).", minimum=0.0)
    active_sampling_rounds: int = _knob(0, "GRPO: extra rounds per step that refill the batch with fresh "
                                        "groups while fewer than prompts_per_step groups carry signal.",
                                        minimum=0)
    rl_weight: float = _knob(1.0, "mixed: weight of the GRPO part's loss.", minimum=0.0)
    opsd_weight: float = _knob(1.0, "mixed: weight of the OPSD part's loss.", minimum=0.0)
    corpus: str | None = _knob(None, "The corpus manifest (its `kept` list): every kept task trains GRPO, "
                               "hinted or not; null: only the tasks of demos.parquet.")
    passk: str | None = _knob(None, "The solve stage's passk.json: pass rates that calibrate the GRPO pool.")
    images_dir: str | None = _knob(None, "Folder of built task images (the build-images stage's).")
    rl_pass_rate_low: float = _knob(0.0, "GRPO pool: a task's solve pass rate must be above this (exclusive).",
                                    minimum=0.0, maximum=1.0)
    rl_pass_rate_high: float = _knob(1.0, "GRPO pool: a task's solve pass rate must be below this (exclusive); "
                                     "the default band 0..1 keeps tasks solved sometimes but not always.",
                                     minimum=0.0, maximum=1.0)
    rl_pool_fallback: str = _knob("all", "When the band holds no task: all (every kept task, said in the "
                                  "metrics) or none (no GRPO part).", choices=("all", "none"))
    max_episode_tokens: int | None = _knob(2048, "Token budget of one episode (prompt + every turn); a reply "
                                           "is capped by what is left, and an episode with no room left "
                                           "ends as token_budget (graded, counted).", minimum=1)
    episode_turn_cap: int = _knob(2, "Harness turn cap of training episodes (solve.turn_cap; 64 at scale).",
                                  minimum=1)
    episode_max_format_errors: int = _knob(2, "Harness format-error cap of training episodes.", minimum=1)
    episode_command_timeout_sec: float = _knob(30.0, "Per-command timeout in training episodes.",
                                               exclusive_minimum=0.0)
    episode_task_timeout_sec: float = _knob(300.0, "Time limit of one training episode, counting its own "
                                            "commands only (not the batched generation every live episode "
                                            "shares, whose duration depends on the machine's load).",
                                            exclusive_minimum=0.0)
    runtime_backend: str = _knob("bwrap", "Sandbox runtime of training episodes.", choices=("bwrap", "apptainer"))
    sandbox_wall_sec: float = _knob(120.0, "Sandbox wall-clock limit (runtime.exec_timeout_sec); also the "
                                    "verifier's timeout.", exclusive_minimum=0.0)
    sandbox_cpu_sec: int = _knob(120, "Sandbox CPU-seconds limit (runtime.cpu_sec).", minimum=1)
    sandbox_memory_mb: int = _knob(4096, "Sandbox memory limit (runtime.memory_mb).", minimum=64)
    max_infra_retries: int = _knob(2, "Re-runs of an episode whose sandbox or grading failed; it is "
                                   "never scored 0.", minimum=0)
    episode_workers: int = _knob(4, "Threads that start sandboxes, run commands and grade.", minimum=1)
    rollout_engine: str = _knob("transformers", "transformers (generate, batched over live episodes) or "
                                "vllm (GPU, colocated, the adapter handed over each step).",
                                choices=("transformers", "vllm"))
    vllm_gpu_memory_utilization: float = _knob(0.35, "vllm engine: its share of GPU memory.",
                                               exclusive_minimum=0.0, maximum=1.0)
    hint_uplift: str | None = _knob(None, "Terminal data: the hint-uplift report (uplift.json of `termforge "
                                    "hint-uplift`): each hinted task's pass rate with its hint in the policy's "
                                    "context and without.")
    drop_hints_without_uplift: bool = _knob(False, "Terminal data: leave out of the OPSD part the tasks whose hint "
                                            "hint_uplift flags as having no uplift (they still train GRPO).")
    reward_probe_size: int = _knob(0, "Terminal data: held-out tasks (kept out of both parts of training) on "
                                   "which the policy's mean verifier reward is measured before and after "
                                   "training; tasks in the GRPO pass-rate band are chosen first (0: off).",
                                   minimum=0)
    reward_probe_tasks: str | None = _knob(None, "Terminal data: a JSON file listing the held-out reward-probe "
                                           "task ids (a list, or an object with `kept`); overrides "
                                           "reward_probe_size. The tasks need not be in the corpus.")
    reward_probe_episodes: int = _knob(4, "Episodes per held-out task at each reward measurement (the same "
                                       "sampling seeds before and after training).", minimum=1)

    def __post_init__(self) -> None:
        if self.teacher_mode == "auto":
            # Resolved here so that checkpoints, metrics and resume checks record the teacher that ran.
            object.__setattr__(self, "teacher_mode", "live" if self.data_kind == "terminal" else "fixed")

    # ----------------------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, values: Mapping[str, Any] | None, where: str = "train") -> "OPSDConfig":
        """Build and validate a config from user input; errors name `where.key`."""
        values = dict(values or {})
        names = [f.name for f in dataclasses.fields(cls)]
        for key in values:
            if key not in names:
                close = difflib.get_close_matches(str(key), names, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise ConfigError(f"{where}.{key}: unknown key{hint}")
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if f.name in values:
                values[f.name] = _check_value(f"{where}.{f.name}", values[f.name], hints[f.name], f.metadata)
        cfg = cls(**values)
        cfg._check_combinations(where)
        return cfg

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def _check_combinations(self, where: str) -> None:
        for key in ("math_context_template", "terminal_context_template"):
            template = getattr(self, key)
            if "{context}" not in template:
                raise ConfigError(f"{where}.{key}: must contain the placeholder {{context}}")
            try:
                template.format(context="")
            except (KeyError, IndexError, ValueError) as exc:
                raise ConfigError(f"{where}.{key}: not a valid template with only {{context}} "
                                  f"(escape other braces as {{{{ }}}}): {exc}") from None
        privileged = "solution" if self.data_kind == "math" else "hint"
        if self.data_kind != "math" and self.prompt_preset == "reference" and self.teacher_template is None:
            raise ConfigError(f"{where}.prompt_preset: the reference preset holds math prompts (a reference "
                              f"solution); a terminal run sets {where}.teacher_template with {{hint}}")
        for key, names in (("student_template", ("problem",)), ("teacher_template", ("problem", privileged))):
            template = getattr(self, key)
            if template is None:
                continue
            missing = [n for n in names if "{" + n + "}" not in template]
            if missing:
                raise ConfigError(f"{where}.{key}: must contain the placeholder "
                                  + " and ".join("{" + n + "}" for n in missing))
            try:
                template.format(**{n: "" for n in names})
            except (KeyError, IndexError, ValueError) as exc:
                raise ConfigError(f"{where}.{key}: not a valid template with only "
                                  f"{', '.join('{' + n + '}' for n in names)} (escape other braces as "
                                  f"{{{{ }}}}): {exc!r}") from None
        try:
            re.compile(self.answer_pattern)
        except re.error as exc:
            raise ConfigError(f"{where}.answer_pattern: not a valid regular expression: {exc}") from None
        if self.finetune == "lora" and not self.lora_target_modules:
            raise ConfigError(f"{where}.lora_target_modules: LoRA needs at least one target module")
        if self.objective != "opsd" and self.data_kind != "terminal":
            raise ConfigError(f"{where}.objective: {self.objective} trains on the verifier's reward; it needs "
                              "data_kind terminal")
        if self.kl_coef > 0 and self.finetune == "full" and self.teacher_mode != "fixed":
            raise ConfigError(f"{where}.kl_coef: the KL reference is the base weights, which full fine-tuning "
                              "keeps only as the fixed teacher; it needs teacher_mode fixed (or finetune lora)")
        for key, value in (("loss_type", "ref_kl"), ("teacher_context_role", "leading_system")):
            if getattr(self, key) == value and self.data_kind != "terminal":
                raise ConfigError(f"{where}.{key}: {value} scores the policy's own terminal episodes (their "
                                  "exact token stream and sampling log-probs); it needs data_kind terminal")
        if self.teacher_context_role == "leading_system" and self.effective_teacher_template is not None:
            raise ConfigError(f"{where}.teacher_template: leading_system keeps the student's stream verbatim "
                              "after the context block; a teacher template rewriting the user message contradicts "
                              "it (set teacher_context_role user or system)")
        if self.rl_pass_rate_low >= self.rl_pass_rate_high:
            raise ConfigError(f"{where}.rl_pass_rate_low: {self.rl_pass_rate_low} must be below "
                              f"rl_pass_rate_high {self.rl_pass_rate_high}")
        if (self.reward_probe_size or self.reward_probe_tasks) and self.data_kind != "terminal":
            raise ConfigError(f"{where}.reward_probe_size: the held-out reward probe runs terminal episodes; it "
                              "needs data_kind terminal")
        if self.drop_hints_without_uplift and not self.hint_uplift:
            raise ConfigError(f"{where}.drop_hints_without_uplift: needs {where}.hint_uplift, the report that says "
                              "which hints have no uplift")
        if self.warmup_steps > self.max_steps:
            raise ConfigError(f"{where}.warmup_steps: {self.warmup_steps} exceeds max_steps {self.max_steps}")

    @property
    def effective_student_template(self) -> str | None:
        return self.student_template if self.student_template is not None else PROMPT_PRESETS[self.prompt_preset][0]

    @property
    def effective_teacher_template(self) -> str | None:
        return self.teacher_template if self.teacher_template is not None else PROMPT_PRESETS[self.prompt_preset][1]

    @property
    def effective_loss_temperature(self) -> float:
        return self.temperature if self.loss_temperature is None else self.loss_temperature

    @property
    def sequences_per_step(self) -> int:
        return self.prompts_per_step * self.rollouts_per_prompt

    def gradient_accumulation_steps(self, num_processes: int = 1) -> int:
        """Micro-batches per optimizer step on each process (the last one may be partial)."""
        per_process = math.ceil(self.sequences_per_step / num_processes)
        return max(1, math.ceil(per_process / self.micro_batch_size))


# Keys that change how a run is executed or recorded but not what it computes (or, for device and
# micro-batch size, only its floating-point rounding): a checkpoint may be resumed under new values.
RESUME_FREE_KEYS = frozenset({
    "device", "num_threads", "generation_batch_size", "micro_batch_size", "loss_chunk_size",
    "checkpoint_every", "checkpoint_keep", "resume", "plot", "gradient_checkpointing",
    "episode_workers", "images_dir", "passk", "corpus", "reward_probe_tasks",
})


def incompatible_keys(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """Keys whose values differ between a checkpoint's config and the current one (sorted)."""
    free = RESUME_FREE_KEYS
    if "micro_batch_mean" in (saved.get("loss_reduction"), current.get("loss_reduction")):
        free = free - {"micro_batch_size"}  # the micro-batches then weigh the tokens
    keys = (set(saved) | set(current)) - free
    return sorted(k for k in keys if _normalise(saved.get(k, _MISSING)) != _normalise(current.get(k, _MISSING)))


_MISSING = object()


def _normalise(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_normalise(v) for v in value]
    if isinstance(value, bool) or value is None or value is _MISSING:
        return value
    if isinstance(value, (int, float)):
        return float(value)
    return value


def _type_name(tp: Any) -> str:
    return {str: "a string", int: "an integer", float: "a number", bool: "true or false"}.get(tp, str(tp))


def _split_optional(hint: Any) -> tuple[Any, bool]:
    """(the non-None type, whether None is allowed) of `X` or `X | None`."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        return next(a for a in args if a is not type(None)), type(None) in args
    return hint, False


def _check_value(key: str, value: Any, hint: Any, metadata: Mapping[str, Any]) -> Any:
    base, nullable = _split_optional(hint)
    if value is None:
        if nullable:
            return None
        raise ConfigError(f"{key}: may not be null")
    origin = typing.get_origin(base)
    if origin is list:
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{key}: expected a list of strings, got {value!r}")
        return list(value)
    if base is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true or false, got {value!r}")
    elif base is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
    elif base is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ConfigError(f"{key}: expected a finite number, got {value!r}")
        value = float(value)
    elif base is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
    choices = metadata.get("choices")
    if choices and value not in choices:
        raise ConfigError(f"{key}: expected one of {', '.join(map(str, choices))}, got {value!r}")
    if metadata.get("minimum") is not None and value < metadata["minimum"]:
        raise ConfigError(f"{key}: must be >= {metadata['minimum']}, got {value!r}")
    if metadata.get("exclusive_minimum") is not None and value <= metadata["exclusive_minimum"]:
        raise ConfigError(f"{key}: must be > {metadata['exclusive_minimum']}, got {value!r}")
    if metadata.get("maximum") is not None and value > metadata["maximum"]:
        raise ConfigError(f"{key}: must be <= {metadata['maximum']}, got {value!r}")
    return value


_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean"}


def config_schema() -> dict[str, Any]:
    """JSON schema (as a dict) of the `train:` section: one property per OPSDConfig field, with its
    type, default, description and bounds. The workflow schema can include it verbatim."""
    hints = typing.get_type_hints(OPSDConfig)
    defaults = OPSDConfig().to_dict()
    properties: dict[str, Any] = {}
    for f in dataclasses.fields(OPSDConfig):
        base, nullable = _split_optional(hints[f.name])
        if typing.get_origin(base) is list:
            prop: dict[str, Any] = {"type": "array", "items": {"type": "string"}}
        else:
            json_type = _JSON_TYPES[base]
            prop = {"type": [json_type, "null"] if nullable else json_type}
        prop["description"] = f.metadata["help"]
        # The declared default (teacher_mode auto), not what an instance resolves it to.
        prop["default"] = f.default if f.default is not dataclasses.MISSING else defaults[f.name]
        if f.metadata.get("choices"):
            prop["enum"] = list(f.metadata["choices"])
        for meta_key, schema_key in (("minimum", "minimum"), ("exclusive_minimum", "exclusiveMinimum"),
                                     ("maximum", "maximum")):
            if f.metadata.get(meta_key) is not None:
                prop[schema_key] = f.metadata[meta_key]
        properties[f.name] = prop
    return {"type": "object", "additionalProperties": False, "default": {},
            "description": "On-policy self-distillation trainer (OPSDConfig).", "properties": properties}
