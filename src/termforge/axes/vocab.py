"""The fixed axis vocabularies of the task signature. Domain contents live in taxonomy.yaml."""

DOMAINS = (
    "security", "software_engineering", "file_operations", "data_querying", "data_science",
    "debugging", "scientific_computing", "data_processing", "system_administration",
)
TASK_COMPLEXITIES = ("short", "moderate", "complex", "intricate")
COMMAND_COMPLEXITIES = ("bash_only", "bash_code", "bash_code_services")
VERIFIER_KINDS = ("exact_text", "metric_threshold", "adversarial_corpus", "fuzz_equivalence", "multi_protocol")
FIXTURE_KINDS = ("text_only", "image", "audio", "video", "stripped_binary", "vendored_package",
                 "multi_service_compose")
# calibration: tasks of the opt-in calibration family only
# (generate/families/calibration/one_step_file_task.py), for showing that training raises a small
# model's reward; no default mix names it.
CORPUS_KINDS = ("legacy", "sft_v2", "rl_v2", "calibration")

# The buckets each corpus kind treats as "legacy"; everything else on that axis is a new (v2) bucket.
LEGACY_BUCKETS = {
    "task_complexity": ("short", "moderate", "complex"),
    "verifier_kind": ("exact_text",),
    "fixture_kind": ("text_only",),
}
