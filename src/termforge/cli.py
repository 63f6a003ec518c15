"""The `termforge` command line: one subcommand per stage.

Each stage takes its options either from `--params` (the JSON a Snakemake rule passes: the
config keys that stage reads, see termforge.params) or from `--configfile`. `--configfile` means
the same in every command: ./config.yaml first, then the files given, merged as
`snakemake --configfile` merges them (termforge.config.config_paths), then validated. Errors a user can fix print one line naming the culprit, no traceback.

How bad input is reported (follow this when adding a command or an option):
- Declare every argument that names a file or folder with `input_arg(sp, "--x", kind=...)` (a
  kind from termforge.schemas.KINDS: "shard_manifest", "corpus_manifest", "dataset", "config",
  "tasks_dir", ...) or `output_arg(sp, "--y", dir=False)`. Before the command runs, main() reads
  and checks every declared input through termforge.schemas (missing, unreadable, corrupt,
  truncated, empty, wrong shape to the leaves, naming task directories that do not exist or that
  reach outside themselves: termforge.containment), so a bad input stops the command before it
  writes anything. Declared outputs are checked too: a file output that is a directory, and a
  task's place in an output folder (<images-dir>/<task id>) that a symlink leads out of.
- Stage code reads its inputs through termforge.schemas.read / termforge.io.load_* too; both
  raise termforge.errors.InputError, which main() prints as one line
  `termforge: error: <command>: <file>: <problem>` (plus how to rebuild a file the workflow
  makes, from errors.PRODUCERS) and exit status 2, always one line (errors.one_line). Outputs go
  through termforge.io's atomic writers, so a failing command leaves no partial file; a command
  with several outputs stages them and publishes them together (io.StagedOutputs).
- tests/test_cli_bad_input.py walks this parser: every declared input of every command gets
  each kind of bad input, and an undeclared path-like argument fails that test.
- A new kind of file: add a Kind (schema, format, checks of the files it names) to
  schemas.KINDS and a valid example to the sweep's ws() fixture. A new rule output: add its
  pattern to errors.PRODUCERS (a test keeps that table equal to the rules' outputs).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import sys
from pathlib import Path

from termforge.cpu_budget import passive_openmp_env
from termforge.errors import (ConfigError, InputError, NoSpaceError, TermforgeError, is_no_space, one_line,
                              os_error_problem, show_path)
from termforge.io import StagedOutputs, atomic_write_json, atomic_write_text


def input_arg(sp: argparse.ArgumentParser, *flags: str, kind: str, **kw) -> argparse.Action:
    """Declare an argument naming a file or folder the command reads (checked by main() first)."""
    from termforge.schemas import KINDS

    if kind not in KINDS:
        raise ValueError(f"input_arg {flags}: unknown kind {kind!r} (see termforge.schemas.KINDS)")
    action = sp.add_argument(*flags, **kw)
    action.termforge_input = kind
    return action


def output_arg(sp: argparse.ArgumentParser, *flags: str, dir: bool = False, **kw) -> argparse.Action:
    """Declare an argument naming a file (or, with dir=True, a folder) the command writes."""
    action = sp.add_argument(*flags, **kw)
    action.termforge_output = "dir" if dir else "file"
    return action


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def check_inputs(sp: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Read and check every declared input argument the user gave (termforge.schemas.read), and
    the declared outputs against them: a file output that is a directory, or a task's place in
    an output folder that a symlink leads out of, stops the command before it starts."""
    from termforge.containment import contained
    from termforge.schemas import read

    task_ids: list[str] = []
    for action in sp._actions:
        kind = getattr(action, "termforge_input", None)
        value = getattr(args, action.dest, None)
        if kind is None or value is None:
            continue
        for path in value if isinstance(value, list) else [value]:
            data = read(kind, path)
            if kind == "shard_manifest":
                task_ids += [t["id"] for t in data["tasks"]]
    for action in sp._actions:
        out = getattr(action, "termforge_output", None)
        value = getattr(args, action.dest, None)
        if out is None or value is None:
            continue
        if out == "file" and Path(value).is_dir():
            raise InputError(value, "is a directory (expected a file to write)")
        if out == "dir":
            if Path(value).exists() and not Path(value).is_dir():
                raise InputError(value, "is not a directory (expected a folder to write into)")
            for tid in task_ids:  # each task's images, trajectories ... go to <dir>/<task id>
                contained(value, tid, where=Path(value) / tid)


def _stage_options(args, stage: str) -> dict:
    from termforge.params import flat_stage_keys, stage_params

    if args.params and args.configfile:
        raise ConfigError("give either --params or --configfile, not both")
    if args.configfile:
        return stage_params(_configured(args.configfile), stage)
    if not args.params:
        raise ConfigError(f"{stage}: pass --configfile config.yaml (or --params JSON from the workflow)")
    try:
        opts = json.loads(args.params)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"--params is not valid JSON: {exc}") from None
    try:
        missing = [k for k in flat_stage_keys(opts, stage) if k not in opts]
    except (KeyError, TypeError) as exc:
        raise ConfigError(f"--params for {stage} lacks {exc}") from None
    if missing:
        raise ConfigError(f"--params for {stage} lacks keys: {', '.join(missing)}")
    return opts


def _configured(overlays: list[str] | None) -> dict:
    """The validated config of a command's --configfile (one meaning everywhere:
    termforge.config.CONFIGFILE_HELP). Without ./config.yaml the overlays merge onto the schema's
    defaults, which is said, since those are not the numbers config.yaml would give."""
    from termforge.config import BASE_CONFIG
    from termforge.plancheck import load_planned_overlays

    if overlays and not Path(BASE_CONFIG).is_file():
        print(f"termforge: note: no {BASE_CONFIG} in {Path.cwd()}: {', '.join(overlays)} merged onto the "
              f"schema's defaults", file=sys.stderr)
    return load_planned_overlays(overlays)


def cmd_check_config(args) -> int:
    from termforge.config import config_paths, model_names, shard_ids
    from termforge.models.base import missing_api_keys

    if args.files and args.configfile:
        raise ConfigError("check-config: give the overlays either as arguments or after --configfile, not both")
    overlays = args.files or args.configfile
    cfg = _configured(overlays)
    ablations = model_names(cfg)[1:]
    print(f"config OK ({' + '.join(map(str, config_paths(overlays)))}): run {cfg['run_name']!r}, "
          f"{cfg['corpus']['n_tasks']} tasks in {len(shard_ids(cfg))} shards of {cfg['corpus']['shard_size']}; "
          f"ablations planned and checked: {', '.join(ablations) or 'none'}")
    for line in missing_api_keys(cfg):
        print(f"termforge: warning: {line}", file=sys.stderr)
    return 0


def cmd_check_cluster(args) -> int:
    from termforge.cluster import NoController, check, format_table, read_inventory, rule_requests, workflow_rules

    requests = rule_requests(*workflow_rules(Path(args.snakefile), args.configfile))
    try:
        inventory = read_inventory()
    except NoController as exc:
        # Not a failure: the same command is right on a laptop and on the login node.
        print(f"termforge: check-cluster: no Slurm controller reachable: skipped ({exc})")
        return 0
    verdicts = check(requests, inventory)
    print(format_table(verdicts))
    for v in verdicts:
        if not v.ok:
            print(f"termforge: cluster check: {v.line()}", file=sys.stderr)
    return 0 if all(v.ok for v in verdicts) else 1


def cmd_serve_policy(args) -> int:
    from termforge.params import resolve_flat
    from termforge.serve import run_policy_server

    o = _stage_options(args, "serve_policy")
    key = resolve_flat(o, "models.{solve.model}")
    sv = o["serve"]
    log_fh = open(args.log, "a", encoding="utf-8") if args.log else None

    def log(line: str) -> None:
        print(line, flush=True)
        if log_fh:
            print(line, file=log_fh, flush=True)

    try:
        run_policy_server(dict(o[key]), key, sv["engine"], Path(args.out), host=sv["host"], port=sv["port"],
                          vllm_args=tuple(sv["vllm_args"]), health_timeout_s=sv["health_timeout_s"], log=log)
    finally:
        if log_fh:
            log_fh.close()
    return 0


def cmd_sample_axes(args) -> int:
    from termforge.axes.sampler import (anchor_honour, axis_balance, draw_signatures, verifier_kind_honour,
                                        write_signatures, write_stats)
    from termforge.axes.taxonomy import load_taxonomy
    from termforge.generate.anchors import anchorless_corpus_kinds, load_bearing_anchors_by_domain
    from termforge.generate.families import default_families, intrinsic_verifier_kinds_by_domain

    o = _stage_options(args, "sample_axes")
    taxonomy = load_taxonomy(o["corpus.taxonomy"])
    domains = o["corpus.domains"] or None
    draw = draw_signatures(o["corpus.n_tasks"], o["seed"], o["corpus.mix"], taxonomy, domains=domains,
                           anchor_prob=o["corpus.anchor_prob"],
                           new_bucket_weight=o["corpus.sft_v2_new_bucket_weight"],
                           verifier_kinds_by_domain=intrinsic_verifier_kinds_by_domain(),
                           anchors_by_domain=load_bearing_anchors_by_domain(taxonomy, default_families()),
                           anchorless_kinds=anchorless_corpus_kinds())
    sigs = draw.signatures
    stats = axis_balance(sigs, taxonomy, domains, draw)
    stats["verifier_kind_honour"] = verifier_kind_honour(draw)
    stats["anchor_honour"] = anchor_honour(draw, taxonomy)
    with StagedOutputs() as staged:  # signatures and their balance, both or neither
        write_signatures(staged.file(args.out), sigs)
        write_stats(staged.file(args.stats), stats)
        staged.publish()
    print(f"sample-axes: {len(sigs)} signatures -> {args.out}; balance (exp(H)/N): "
          + ", ".join(f"{k}={v['normalised_effective_number']:.2f}" for k, v in stats["axes"].items()
                      if v.get("normalised_effective_number") is not None))
    return 0


def cmd_generate(args) -> int:
    from termforge.generate.stage import run_generate_shard

    o = _stage_options(args, "generate")
    if o["generate.backend"] == "llm":
        from termforge.generate.llm import run_generate_shard_llm
        from termforge.models.registry import make_model
        from termforge.params import resolve_flat
        from termforge.images.runtimes import get_runtime
        from termforge.planning import generation_cost

        key = resolve_flat(o, "models.{generate.model}")
        model = make_model(dict(o[key]), where=key)
        try:
            run_generate_shard_llm(Path(args.signatures), int(args.shard), o["corpus.shard_size"],
                                   Path(args.tasks_dir), Path(args.out), model,
                                   max_repair_rounds=o["generate.max_repair_rounds"],
                                   base_image=o["generate.base_image"], images_dir=Path(args.images_dir),
                                   cost=functools.partial(generation_cost, {
                                       "generate": {"backend": "llm", "model": o["generate.model"],
                                                    "max_repair_rounds": o["generate.max_repair_rounds"]},
                                       "models": {o["generate.model"]: dict(o[key])},
                                       "prices": o["prices"], "planning": o["planning"]}),
                                   workers=o["generate.workers"],
                                   second_solution=o["generate.second_solution"],
                                   runtime=get_runtime("bwrap", rootfs=o["runtime.rootfs"]))
        finally:
            model.close()
        return 0
    run_generate_shard(Path(args.signatures), int(args.shard), o["corpus.shard_size"], Path(args.tasks_dir),
                       Path(args.out), backend=o["generate.backend"], base_image=o["generate.base_image"],
                       workers=o["generate.workers"])
    return 0


def cmd_export(args) -> int:
    from termforge.export import push_to_hub, run_export

    if args.verifiers:
        return _export_verifiers(args)
    o = _stage_options(args, "export")
    if not args.manifests and not args.corpus:
        raise ConfigError("export: give --corpus (kept tasks) or --manifests (every generated task)")
    if args.oci and not args.images_dir:
        raise ConfigError("export --oci: give --images-dir (the built task images, e.g. results/images)")
    run_export([Path(m) for m in args.manifests or []], Path(args.out_dir), Path(args.demos) if args.demos else None,
               corpus_manifest=Path(args.corpus) if args.corpus else None, require_demo=o["export.require_demo"],
               oci_images_dir=Path(args.images_dir) if args.oci else None)
    push_to_hub(Path(args.out_dir), o["export.hf_repo_id"], o["export.hf_token_env"], o["export.hf_private"])
    return 0


def _export_verifiers(args) -> int:
    from termforge.export_verifiers import export_config, run_export_verifiers

    if args.configfile and not args.params:
        from termforge.params import stage_params
        from termforge.plancheck import load_planned

        o = stage_params(export_config(load_planned(args.configfile)), "export_verifiers")
    else:
        o = _stage_options(args, "export_verifiers")
    if not args.corpus:
        raise ConfigError("export --verifiers: give --corpus (the corpus manifest of kept tasks)")
    if not args.images_dir:
        raise ConfigError("export --verifiers: give --images-dir (the built task images; rollouts run in them)")
    run_export_verifiers(Path(args.corpus), Path(args.demos) if args.demos else None, Path(args.images_dir),
                         Path(args.out_dir), o)
    return 0


def cmd_build_images(args) -> int:
    from termforge.images import run_build_shard

    o = _stage_options(args, "build_images")
    run_build_shard(Path(args.manifest), Path(args.images_dir), Path(args.out), backend=o["runtime.backend"],
                    timeout=o["runtime.build_timeout_sec"], workers=o["validate.workers"], rootfs=o["runtime.rootfs"])
    return 0


def cmd_decontaminate(args) -> int:
    from termforge.quality.decontam import (decontaminate_tasks, load_harbor_references, load_hf_references,
                                            load_jsonl_references, manifest_tasks)

    o = _stage_options(args, "decontaminate")
    refs = []
    for d in o["decontam.harbor_dirs"]:
        refs += load_harbor_references(d)
    for ds in o["decontam.hf_datasets"]:
        refs += load_hf_references(ds["id"], ds["column"], ds.get("split", "test"))
    for j in o["decontam.jsonl"]:
        refs += load_jsonl_references(j["path"], j["column"])
    # The shard manifests name every task (ids and directories without opening task.json), and
    # the shard documents files generate wrote beside them hold their texts where still fresh.
    tasks, documents = manifest_tasks(args.manifests)
    report = decontaminate_tasks(tasks, refs, n=o["decontam.n"], policy=o["decontam.policy"],
                                 near_dup_policy=o["decontam.near_dup_policy"], near_dups=o["decontam.near_dups"],
                                 near_dup_threshold=o["decontam.near_dup_threshold"],
                                 min_shared=o["decontam.min_shared"], workers=args.workers, documents=documents)
    atomic_write_json(args.out, report)
    s = report["summary"]
    print(f"decontaminate: {s['tasks']} tasks against {s['references']} reference documents: "
          f"{s['contaminated_tasks']} contaminated, {s['near_duplicate_tasks']} near-duplicates, "
          f"{s['dropped']} dropped (policy {o['decontam.policy']})")
    return 0


def cmd_validate(args) -> int:
    from termforge.quality.validate import run_validate_shard
    from termforge.runtime.base import Limits

    o = _stage_options(args, "validate")
    limits = Limits.from_options(o)
    run_validate_shard(Path(args.manifest), Path(args.out), Path(args.images_dir), limits,
                       decontam_report=Path(args.decontam) if args.decontam else None,
                       workers=o["validate.workers"], oracle_repeats=o["validate.oracle_repeats"],
                       backend=o["runtime.backend"], mutants=o["validate.mutants"],
                       sensitivity=o["validate.input_sensitivity"], rootfs=o["runtime.rootfs"],
                       profile_path=Path(args.profile) if args.profile else None,
                       grade_pool=o["validate.grade_pool"], concurrent_checks=o["validate.concurrent_checks"])
    return 0


def cmd_corpus_manifest(args) -> int:
    from termforge.quality.validate import write_corpus_manifest

    write_corpus_manifest([Path(p) for p in args.verdicts], Path(args.out),
                          [Path(p) for p in args.reviews] if args.reviews is not None else None)
    return 0


def _review_judge(o: dict):
    """The review judge (a ChatModel built from its `models` spec), or None when none is set."""
    name = (o.get("review") or {}).get("judge")
    if not name:
        return None
    from termforge.models.registry import make_model
    from termforge.params import flat_lookup

    try:
        spec = flat_lookup(o, f"models.{name}")
    except KeyError:
        raise ConfigError(f"review.judge: model {name!r} is not defined under models") from None
    return make_model(dict(spec), where=f"models.{name}")


def cmd_review(args) -> int:
    from termforge.quality.review import run_review_shard, run_review_traces

    o = _stage_options(args, "review")
    judge = _review_judge(o)
    r = o["review"]
    try:
        if args.solved:
            run_review_traces(Path(args.solved), Path(args.out), judge, r["min_score"], r["batch_size"])
        else:
            run_review_shard(Path(args.verdicts), Path(args.out), judge, r["min_score"], r["batch_size"])
    finally:
        if judge is not None:
            judge.close()
    return 0


def _model_for(o: dict, role_key: str, models_key: str, agent: str = "model", tasks_dir: Path | None = None):
    from termforge.models.registry import make_model
    from termforge.solve import OracleReplayModel

    if agent == "oracle":
        return OracleReplayModel(tasks_dir)
    from termforge.params import resolve_flat

    key = resolve_flat(o, models_key)
    return make_model(dict(o[key]), where=key)


def cmd_solve(args) -> int:
    from termforge.harness import HarnessConfig
    from termforge.models.base import SamplingParams
    from termforge.models.cache import CachedChatModel
    from termforge.runtime.base import Limits
    from termforge.solve import SolveSettings, run_solve_shard

    o = _stage_options(args, "solve")
    s = o["solve"]
    from termforge.schemas import read

    tasks_dir = Path(read("shard_manifest", args.manifest)["tasks_dir"])
    if args.server and s["agent"] == "model":  # the workflow's policy server (termforge.serve)
        from termforge.models.registry import make_model
        from termforge.serve import served_model_spec

        model = make_model(served_model_spec(args.server, s["concurrency"]), where=f"{args.server}")
    else:
        model = _model_for(o, "solve.model", "models.{solve.model}", s["agent"], tasks_dir)
    if s["agent"] == "model" and s.get("cache_dir") and not isinstance(model, CachedChatModel):
        model = CachedChatModel(model, s["cache_dir"])
    harness = HarnessConfig(turn_cap=s["turn_cap"], max_format_errors=s["max_format_errors"],
                            command_timeout_sec=s["command_timeout_sec"], task_timeout_sec=s["task_timeout_sec"],
                            sampling=SamplingParams.from_dict(s["sampling"], where="solve.sampling"))
    limits = Limits.from_options(o)
    settings = SolveSettings(k=s["k"], concurrency=s["concurrency"], max_infra_retries=s["max_infra_retries"],
                             seed=o["seed"], harness=harness, limits=limits, backend=o["runtime.backend"])
    try:
        run_solve_shard(Path(args.manifest), Path(args.corpus), Path(args.images_dir), Path(args.out),
                        Path(args.trajectories), model, settings)
    finally:
        model.close()
    return 0


def cmd_passk(args) -> int:
    from termforge.passk import run_passk

    run_passk([Path(p) for p in args.solved], Path(args.out), Path(args.csv), Path(args.sft) if args.sft else None,
              [Path(p) for p in args.trace_reviews or []])
    return 0


def cmd_make_math_set(args) -> int:
    from termforge.mathdata import write_math_set

    o = _stage_options(args, "math_data")
    info = write_math_set(Path(args.out_dir), o["math_data"]["n"], o["seed"], o["math_data"]["heldout_fraction"])
    print(f"make-math-set: {info['train']} train and {info['heldout']} held-out problems -> {args.out_dir}")
    return 0


def _policy(o: dict, weights: str | None):
    from termforge.evals.run import load_policy
    from termforge.params import resolve_flat

    key = resolve_flat(o, "models.{eval.model}")
    weights_dir = None
    if weights:
        from termforge.schemas import read

        weights_dir = Path(read("train_summary", weights)["weights"])
    return load_policy(dict(o[key]), weights_dir, where=key)


def cmd_train(args) -> int:
    from termforge.opsd.trainer import run_train_cli_args

    o = _stage_options(args, "train")
    kwargs = dict(dataset=args.dataset, probe_dataset=args.probe_dataset, demos=args.demos, tasks_dir=args.tasks_dir,
                  images_dir=args.images_dir, passk=args.passk, corpus=args.corpus)
    try:
        summary = run_train_cli_args(o["train"], Path(args.out_dir), **kwargs)
    except ConfigError as exc:
        # The workflow re-runs training because its params changed: the old checkpoints belong to
        # the previous config, so they are set aside and training starts over. An interrupted run
        # with the same config still resumes (its checkpoints are compatible).
        if not (args.restart_on_config_change and "written by a different config" in str(exc)):
            raise
        import shutil

        old = Path(args.out_dir) / "checkpoints"
        shutil.rmtree(old)
        print(f"train: {exc}; the workflow changed the config, so {old} was removed and training starts over")
        summary = run_train_cli_args(o["train"], Path(args.out_dir), **kwargs)
    probe = summary.get("kl_probe") or {}
    print(f"train: {summary.get('steps')} steps -> {args.out_dir}; final loss {summary.get('final_loss')}; "
          f"held-out KL(teacher||student) before {probe.get('before')} after {probe.get('after')}")
    return 0


def _task_count(text: str) -> int:
    """argparse type of a task count (0: every task), refused before any work starts."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected 0 (every hinted task) or a positive count, got {text!r}")
    return value


def cmd_hint_uplift(args) -> int:
    from termforge.opsd.uplift_run import run_uplift_cli

    o = _stage_options(args, "train")
    run_uplift_cli(o["train"], Path(args.out), demos=args.demos, tasks_dir=args.tasks_dir, images_dir=args.images_dir,
                   corpus=args.corpus, k=args.k, min_uplift=args.min_uplift, max_tasks=args.task_count)
    return 0


def cmd_eval_aime(args) -> int:
    from termforge.evals.aime import load_aime, run_aime_eval
    from termforge.evals.run import write_eval_record
    from termforge.models.base import SamplingParams

    o = _stage_options(args, "eval_aime")
    a = o["eval.aime"]
    source = a["source"]
    if source == "math_data:heldout":
        if not args.math_heldout:
            raise ConfigError("eval.aime.source: math_data:heldout needs --math-heldout (the workflow passes it)")
        source = args.math_heldout
    problems = load_aime(source, a["split"], problem_col=a["problem_col"], answer_col=a["answer_col"],
                         where="eval.aime.source")
    if a["max_problems"]:
        problems = problems[: a["max_problems"]]
    sampling = SamplingParams.from_dict({**a["sampling"], "seed": o["seed"]}, where="eval.aime.sampling")
    model = _policy(o, args.weights)
    try:
        summary = run_aime_eval(model, problems, a["n"], sampling, Path(args.out_dir), thinking=a["thinking"])
    finally:
        model.close()
    write_eval_record(Path(args.out), args.model_name, a["benchmark"], "aime", summary)
    n = a["n"]
    print(f"eval-aime {args.model_name} on {a['benchmark']}: {len(problems)} problems x {n} samples, "
          f"avg@{n}={summary.get(f'avg@{n}')}, pass@{n}={summary.get(f'pass@{n}')}")
    return 0


def cmd_eval_tbench(args) -> int:
    from termforge.evals.harbor_tasks import NativeOptions, load_harbor_dataset
    from termforge.evals.run import harness_agent, write_eval_record
    from termforge.evals.tbench import (CONTROL_AGENTS, format_controls, format_table, run_harbor, run_native,
                                        run_native_controls)
    from termforge.harness import HarnessConfig
    from termforge.models.base import SamplingParams
    from termforge.runtime.base import Limits

    o = _stage_options(args, "eval_tbench")
    t = o["eval.tbench"]
    out_dir = Path(args.out_dir)
    if t["runner"] == "harbor":
        results = run_harbor(t["tasks_dir"], t["harbor_agent"], t["harbor_model"], t["harbor_env"],
                             t["n_concurrent"], t["k"], out_dir)
        # Control rows from the same runner: Harbor's own oracle and nop agents.
        controls = {name: run_harbor(t["tasks_dir"], agent, None, t["harbor_env"], t["n_concurrent"], 1,
                                     out_dir / "controls", job_name=name).summary
                    for name, agent in CONTROL_AGENTS.items()}
    else:
        tasks, broken = load_harbor_dataset(t["tasks_dir"])
        harness = HarnessConfig(turn_cap=t["turn_cap"], max_format_errors=t["max_format_errors"],
                                command_timeout_sec=t["command_timeout_sec"],
                                sampling=SamplingParams.from_dict({**t["sampling"], "seed": o["seed"]},
                                                                  where="eval.tbench.sampling"))
        model = _policy(o, args.weights)
        try:
            agent = harness_agent(model, harness, f"vanillux:{args.model_name}")
            limits = Limits.from_options(o)
            native = NativeOptions(pull_images=t["pull_images"], network_namespace=t["network_namespace"],
                                   build_network=t["build_network"])
            results = run_native(tasks, agent, t["k"], Path(args.images_dir), out_dir, limits,
                                 n_concurrent=t["n_concurrent"], dataset=t["benchmark"], broken=broken,
                                 options=native)
        finally:
            model.close()
        controls = run_native_controls(tasks, Path(args.images_dir), out_dir / "controls", limits, broken=broken,
                                       dataset=t["benchmark"], n_concurrent=t["n_concurrent"], options=native)
    write_eval_record(Path(args.out), args.model_name, t["benchmark"], "tbench", results.summary, controls)
    print(format_table(results.summary) + format_controls(controls))
    return 0


def cmd_import_harbor(args) -> int:
    from termforge.evals.harbor_import import import_harbor

    s = import_harbor(args.source, Path(args.out_dir), args.name,
                      harbor_dir=Path(args.harbor_dir) if args.harbor_dir else None)
    for row in s["tasks"]:
        if not row["imported"]:
            print(f"import-harbor: {row['harbor_name']}: not imported: {row['reason']}")
    print(f"import-harbor: {s['n_imported']} of {s['n_tasks']} tasks imported into {s['manifest']}; register the "
          f"dataset for decontamination with decontam.jsonl: [{json.dumps(s['decontam_reference'])}]")
    return 0


def cmd_images(args) -> int:
    """`termforge images build|list|add|save|lock` (docs/images.md)."""
    import time

    from termforge.images import built_bases, ensure_base, ensure_task_base, image_cache_dir, load_declarations
    from termforge.images.store import ImageStore, image_store_dir, register_base

    cache = image_cache_dir(args.cache)
    store = ImageStore(image_store_dir(args.store, cache))
    if args.action == "build":
        names = args.names or sorted(load_declarations())
        start = time.monotonic()
        built = [ensure_base(n, cache) for n in names]
        for task_dir in args.harbor or []:
            from termforge.evals.harbor_tasks import (EnvironmentUnsupported, check_base_image, load_harbor_dir,
                                                      native_plan, verifier_apt_packages)

            for task in load_harbor_dir(task_dir):
                try:
                    plan = native_plan(task)
                    built.append(ensure_task_base(check_base_image(plan.base_image),
                                                  sorted(set(plan.apt_packages) | set(verifier_apt_packages(task))),
                                                  cache))
                except EnvironmentUnsupported:
                    continue  # the eval reports it as an environment error
        for b in built:
            register_base(b, store)
        print(f"images build: {len({b.digest for b in built})} base image(s) ready in {time.monotonic() - start:.1f}s "
              f"({', '.join(sorted({b.record['name'] for b in built}))}; cache {cache})")
        return 0
    if args.action == "list":
        print(f"base images in the cache {cache}:")
        for b in built_bases(cache):
            r = b.record
            print(f"  {r['name']:40s} {r['digest'][:19]}  {r['size'] / 1e6:6.0f} MB  {r['package_count']:4d} packages"
                  f"  {' '.join(r['names'])}")
        print(f"images in the store {store.root}:")
        for image in store.images():
            print(f"  {image.name:40s} {image.digest[:19]}  {image.size / 1e6:6.0f} MB  {len(image.layers)} layer(s)")
        return 0
    if args.action == "add":
        if not args.names or len(args.names) != 2:
            raise ConfigError("images add: give NAME and SOURCE (a rootfs tarball, OCI layout, OCI or docker archive)")
        image = store.add(args.names[0], args.names[1], ref=args.ref)
        print(f"images add: {image.name} {image.digest[:19]} ({len(image.layers)} layer(s), {image.size / 1e6:.0f} MB) "
              f"-> {store.root}")
        return 0
    if args.action == "pull":
        if not args.names or len(args.names) > 2:
            raise ConfigError("images pull: give REF (docker://NAME[:TAG|@DIGEST]) and optionally the NAME to store "
                              "it under")
        image = store.pull(args.names[0], args.names[1] if len(args.names) == 2 else None)
        print(f"images pull: {image.name} {image.digest[:19]} ({len(image.layers)} layer(s), {image.size / 1e6:.0f} MB) "
              f"-> {store.root}")
        return 0
    if args.action == "save":
        if not args.names or len(args.names) != 2:
            raise ConfigError("images save: give NAME and the OCI archive to write")
        out = store.save(args.names[0], args.names[1])
        print(f"images save: {args.names[0]} -> {out} (oci-archive)")
        return 0
    if args.action == "lock":
        for name in args.names or sorted(load_declarations()):
            b = ensure_base(name, cache)
            print(f"# {b.record['name']} {b.digest} lock {b.record['lock_digest']}")
            print("\n".join(b.lock_lines()))
        return 0
    raise ConfigError(f"images: unknown action {args.action!r}")


def cmd_eval_table(args) -> int:
    from termforge.evals.run import write_eval_table

    rows = write_eval_table([Path(p) for p in args.records], Path(args.out))
    print(f"eval-table: {len(rows)} rows from {len(args.records)} evaluations -> {args.out}")
    return 0


def cmd_hints(args) -> int:
    from termforge.export import load_kept_tasks
    from termforge.hints import run_hints
    from termforge.params import resolve_flat

    o = _stage_options(args, "hints")
    model = None
    checks: dict = {}
    if o["hints.backend"] == "llm":
        from termforge.models.registry import make_model
        from termforge.params import flat_lookup

        def spec(name_key: str) -> tuple[str, dict]:
            key = resolve_flat(o, "models.{" + name_key + "}")
            try:
                return key, dict(flat_lookup(o, key))
            except KeyError:
                raise ConfigError(f"{name_key}: model {o[name_key]!r} is not defined under models") from None

        key, model_spec = spec("hints.model")
        model = make_model(model_spec, where=key)
        # The judge and the probe are built by the stage (and closed by it).
        checks = {name: spec(f"hints.{name}")[1] for name in ("judge", "probe") if o.get(f"hints.{name}")}
    task_dirs = [d for _, d in load_kept_tasks(Path(args.corpus))]
    try:
        run_hints(task_dirs, o["hints.backend"], Path(args.out_dir), model=model, max_rounds=o["hints.max_rounds"],
                  n=o["hints.ngram"], max_words=o["hints.max_words"], judge=checks.get("judge"),
                  probe=checks.get("probe"), judge_corpus=o.get("hints.judge_corpus") or 0)
    finally:
        if model is not None:
            model.close()
    return 0


def cmd_dvc_yaml(args) -> int:
    import os

    from termforge.config import REPO_ROOT, config_paths, read_yaml
    from termforge.dvcgen import dvc_yaml, snakemake_rules

    cfg = _configured(args.configfile)
    # Params are named in the files that write them, by paths relative to the first file's folder
    # (the project, where dvc.yaml lives); the files after it are the stage commands' overlays.
    paths = config_paths(args.configfile)
    root = paths[0].resolve().parent
    files = [(os.path.relpath(p.resolve(), root), read_yaml(p)) for p in paths]
    sys.stdout.write(dvc_yaml(cfg, snakemake_rules(REPO_ROOT), files=files))
    return 0


def cmd_dvc_receipt(args) -> int:
    from termforge.dvcgen import write_receipt

    write_receipt(args.stage, args.targets, args.out)
    print(f"dvc-receipt: {args.stage}: {len(args.targets)} targets -> {args.out}")
    return 0


GPU_RULES = ("train_opsd", "eval_aime", "eval_tbench")


def cmd_report(args) -> int:
    from termforge.report import build_report

    info = build_report(Path(args.results), Path(args.out), Path(args.tables), gpu_rules=set(args.gpu_rules))
    done = sum(1 for v in info["sections"].values() if v == "ok")
    print(f"report: {args.out} ({done}/{len(info['sections'])} sections with data; main table: {info['main_table']})")
    return 0


def cmd_dag(args) -> int:
    from termforge.config import REPO_ROOT
    from termforge.dag import mermaid_rulegraph, write_dag_pictures

    from termforge.dag import dvc_dag_markdown, update_readme_dvc_dag

    write_dag_pictures(REPO_ROOT, Path(args.out), configfiles=args.configfile)
    if args.mermaid:
        atomic_write_text(
            args.mermaid, mermaid_rulegraph(REPO_ROOT, configfiles=args.configfile))
    if args.readme:
        changed = update_readme_dvc_dag(args.readme, dvc_dag_markdown(REPO_ROOT))
        print(f"dag: {args.readme} DVC stage graph {'updated' if changed else 'already current'}")
    print(f"dag: pictures in {args.out}")
    return 0


def cmd_plan(args) -> int:
    from termforge.planning import estimate, format_estimate

    est = estimate(_configured(args.configfile))
    print(format_estimate(est))
    if args.json:
        atomic_write_json(args.json, est)
    return 0


def cmd_combine(args) -> int:
    from termforge.planning import combine

    out = combine([Path(m) for m in args.manifests], args.mode, Path(args.out), axis=args.axis, seed=args.seed)
    print(f"combine ({args.mode}): {len(out['kept'])} tasks -> {args.out}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from termforge.config import CONFIGFILE_HELP

    p = argparse.ArgumentParser(prog="termforge", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)

    def stage(name: str, help_: str):
        sp = sub.add_parser(name, help=help_)
        sp.add_argument("--params", help="stage options as JSON (what the Snakemake rule passes)")
        input_arg(sp, "--configfile", kind="config", nargs="+", help=f"instead of --params: {CONFIGFILE_HELP}")
        return sp

    sp = sub.add_parser("check-cluster", help="can every Slurm rule run on this cluster's partitions? (a table)")
    input_arg(sp, "--configfile", kind="config", nargs="*", default=[],
              help=f"{CONFIGFILE_HELP} (./config.yaml being the Snakefile's folder's)")
    input_arg(sp, "--snakefile", kind="text", default="Snakefile",
              help="the workflow whose rules' resources are checked (default: ./Snakefile)")
    sp.set_defaults(func=cmd_check_cluster)

    sp = sub.add_parser("check-config", help="validate config.yaml and overlays, and every planned job's config")
    input_arg(sp, "files", kind="config", nargs="*", default=[], help="the same as --configfile FILES")
    input_arg(sp, "--configfile", kind="config", nargs="+", default=[], help=CONFIGFILE_HELP)
    sp.set_defaults(func=cmd_check_config)

    sp = stage("sample-axes", "sample task signatures from the taxonomy")
    output_arg(sp, "--out", required=True, help="signatures.jsonl")
    output_arg(sp, "--stats", required=True, help="per-axis balance JSON")
    sp.set_defaults(func=cmd_sample_axes)

    sp = stage("generate", "generate the task directories of one shard")
    input_arg(sp, "--signatures", kind="signatures", required=True,
              help="signatures.jsonl from sample-axes (the shard's rows are generated)")
    sp.add_argument("--shard", required=True, help="the shard number (00000, 00001, ...; rows shard*shard_size on)")
    output_arg(sp, "--tasks-dir", dir=True, required=True,
               help="where the task directories go (one per task id; finished ones are kept)")
    output_arg(sp, "--out", required=True, help="shard manifest JSON")
    output_arg(sp, "--images-dir", dir=True, default="results/images",
               help="llm backend: where the images its checks build are kept (build-images reuses them)")
    sp.set_defaults(func=cmd_generate)

    sp = stage("build-images", "build the images of one shard's tasks")
    input_arg(sp, "--manifest", kind="shard_manifest", required=True, help="shard manifest from generate")
    output_arg(sp, "--images-dir", dir=True, required=True,
               help="where each task's image goes (<images-dir>/<task id>; unchanged ones are kept)")
    output_arg(sp, "--out", required=True, help="build manifest JSON")
    sp.set_defaults(func=cmd_build_images)

    sp = stage("decontaminate", "n-gram overlap with reference sets and near-duplicates in the corpus")
    input_arg(sp, "--manifests", kind="shard_manifest", nargs="+", required=True,
              help="every shard manifest of the corpus (near-duplicates are looked for across shards)")
    output_arg(sp, "--out", required=True, help="decontamination report JSON")
    sp.add_argument("--workers", type=int, default=1, help="processes reading and scanning tasks (the job's threads)")
    sp.set_defaults(func=cmd_decontaminate)

    sp = stage("validate", "validate one shard's tasks (static, build, tests, oracle, no-op, probes)")
    input_arg(sp, "--manifest", kind="shard_manifest", required=True, help="shard manifest from generate")
    output_arg(sp, "--images-dir", dir=True, required=True,
               help="the task images build-images made (a missing or stale one is built here)")
    input_arg(sp, "--decontam", kind="decontam_report", help="decontamination report: its dropped tasks are not validated")
    output_arg(sp, "--out", required=True, help="verdicts JSON")
    output_arg(sp, "--profile", help="per-step profile JSON (count, wall and CPU seconds per validation step)")
    sp.set_defaults(func=cmd_validate)

    sp = stage("review", "rubric review by a judge model of one validated shard's kept tasks")
    input_arg(sp, "--verdicts", kind="verdicts", required=True, help="verdicts of one validated shard")
    output_arg(sp, "--out", required=True, help="reviews JSON")
    sp.set_defaults(func=cmd_review, solved=None)

    sp = stage("review-traces", "rubric review by a judge model of one solve shard's successful rollouts")
    input_arg(sp, "--solved", kind="solve_records", required=True, help="rollouts of one solve shard")
    output_arg(sp, "--out", required=True, help="reviews JSON")
    sp.set_defaults(func=cmd_review, verdicts=None)

    sp = sub.add_parser("corpus-manifest", help="merge shard verdicts into the manifest of kept tasks")
    input_arg(sp, "--verdicts", kind="verdicts", nargs="+", required=True,
              help="every shard's verdicts JSON from validate")
    input_arg(sp, "--reviews", kind="reviews", nargs="*",
              help="rubric reviews of the shards: tasks the review dropped leave the corpus")
    output_arg(sp, "--out", required=True, help="the corpus manifest JSON (kept tasks, and why the others went)")
    sp.set_defaults(func=cmd_corpus_manifest)

    sp = stage("solve", "k rollouts per kept task of one shard, graded by the clean verifier")
    input_arg(sp, "--manifest", kind="shard_manifest", required=True, help="shard manifest from generate")
    input_arg(sp, "--corpus", kind="corpus_manifest", required=True, help="corpus manifest of kept tasks")
    output_arg(sp, "--images-dir", dir=True, required=True,
               help="the task images build-images made (rollouts run in them)")
    output_arg(sp, "--trajectories", dir=True, required=True, help="directory for per-rollout trajectories")
    output_arg(sp, "--out", required=True, help="rollouts JSON of the shard")
    input_arg(sp, "--server", kind="policy_server",
              help="policy server JSON from serve-policy: solve through that server")
    sp.set_defaults(func=cmd_solve)

    sp = stage("serve-policy", "serve the solve model over the OpenAI protocol until SIGTERM (a service job)")
    output_arg(sp, "--out", required=True, help="JSON written once healthy: base_url, model, engine, pid")
    output_arg(sp, "--log", help="also append the server's own lines here")
    sp.set_defaults(func=cmd_serve_policy)

    sp = sub.add_parser("passk", help="pass@k tables from the solve stage, and the SFT set of successes")
    input_arg(sp, "--solved", kind="solve_records", nargs="+", required=True,
              help="every solve shard's rollouts JSON")
    output_arg(sp, "--out", required=True, help="pass@k JSON: overall, per task and per domain/complexity/kind")
    output_arg(sp, "--csv", required=True, help="the per-task pass@k table as CSV")
    output_arg(sp, "--sft", help="parquet of successful rollouts (chat messages)")
    input_arg(sp, "--trace-reviews", kind="reviews", nargs="*",
              help="rubric reviews of the solve traces: a rollout they reject is no success")
    sp.set_defaults(func=cmd_passk)

    sp = stage("make-math-set", "generate the offline integer-answer math set (train + held-out)")
    output_arg(sp, "--out-dir", dir=True, required=True, help="where train.jsonl and heldout.jsonl go")
    sp.set_defaults(func=cmd_make_math_set)

    sp = stage("train", "OPSD: on-policy self-distillation of the policy (one ablation)")
    output_arg(sp, "--out-dir", dir=True, required=True,
               help="the run's folder: weights, checkpoints (a rerun resumes), metrics, summary.json")
    input_arg(sp, "--dataset", kind="dataset", help="math prompts (overrides train.dataset)")
    input_arg(sp, "--probe-dataset", kind="dataset", help="held-out math rows for the KL probe (overrides train.probe_dataset)")
    input_arg(sp, "--demos", kind="demos", help="demos.parquet for terminal data (overrides train.demos)")
    input_arg(sp, "--tasks-dir", kind="tasks_dir", help="task directories for terminal data (overrides train.tasks_dir)")
    input_arg(sp, "--images-dir", kind="results_dir",
              help="built task images for terminal episodes (overrides train.images_dir)")
    input_arg(sp, "--passk", kind="passk", help="solve pass rates that calibrate the GRPO pool (overrides train.passk)")
    input_arg(sp, "--corpus", kind="corpus_manifest",
              help="corpus manifest whose kept tasks train GRPO (overrides train.corpus)")
    sp.add_argument("--restart-on-config-change", action="store_true",
                    help="start over when the checkpoints were written by another config (what the workflow does)")
    sp.set_defaults(func=cmd_train)

    sp = stage("hint-uplift", "each hinted task's pass rate with its hint in the policy's context vs without")
    output_arg(sp, "--out", required=True, help="the uplift report (results/hints/uplift.json)")
    input_arg(sp, "--demos", kind="demos", required=True, help="demos.parquet of the hints stage")
    input_arg(sp, "--tasks-dir", kind="tasks_dir", required=True, help="the task directories")
    input_arg(sp, "--images-dir", kind="results_dir", required=True, help="built task images")
    input_arg(sp, "--corpus", kind="corpus_manifest", help="corpus manifest (its kept tasks and collected tests)")
    sp.add_argument("--k", type=int, default=8, help="episodes per task and arm (same seeds in both; at least 8)")
    sp.add_argument("--min-uplift", type=float, default=0.0, help="a hint whose uplift is not above this is flagged")
    sp.add_argument("--task-count", type=_task_count, default=0, help="hinted tasks to measure: 0 every one, N of them spread "
                    "over the families in turn (hints.uplift_tasks)")
    sp.set_defaults(func=cmd_hint_uplift)

    for name, func, help_ in (("eval-aime", cmd_eval_aime, "AIME-style math eval: avg@n, pass@n, maj@n"),
                              ("eval-tbench", cmd_eval_tbench, "Terminal-Bench-format eval: mean reward, pass@k")):
        sp = stage(name, help_)
        sp.add_argument("--model-name", required=True, help="base or an ablation name")
        input_arg(sp, "--weights", kind="train_summary", help="the training summary.json whose final weights to evaluate")
        output_arg(sp, "--out-dir", dir=True, required=True, help="directory for per-item results")
        output_arg(sp, "--out", required=True, help="the eval record JSON")
        input_arg(sp, "--math-heldout", kind="dataset", help="held-out split of the offline math set (for math_data:heldout)")
        output_arg(sp, "--images-dir", dir=True, default="results/images/tbench",
                   help="where the benchmark tasks' images are built and kept (default: %(default)s)")
        sp.set_defaults(func=func)

    sp = sub.add_parser("import-harbor", help="a folder of Harbor tasks (or a Harbor dataset id) as a task corpus")
    input_arg(sp, "source", kind="harbor_source",
              help="a Harbor task or dataset folder, or NAME[@VERSION] fetched with the harbor CLI")
    output_arg(sp, "--out-dir", dir=True, required=True,
               help="where the imported corpus goes: task directories, shard and corpus manifests")
    sp.add_argument("--name", help="dataset name (task id prefix, reference source); default: the folder's name, "
                                   "or the dataset id (terminal-bench@2.0: terminal-bench-2.0)")
    output_arg(sp, "--harbor-dir", dir=True,
               help="where the Harbor tasks themselves go (what eval.tbench.tasks_dir names); default OUT_DIR/harbor")
    sp.set_defaults(func=cmd_import_harbor)

    sp = sub.add_parser("images", help="base images and the local image store: build, list, add, pull, save, lock")
    sp.add_argument("action", choices=["build", "list", "add", "pull", "save", "lock"],
                    help="build: the declared bases (all, or NAMES); list: the cache and the store; add NAME SOURCE: "
                         "a rootfs tarball, OCI layout, OCI or docker archive into the store; pull REF [NAME]: an "
                         "image from a registry (docker://ubuntu:24.04, a digest) into the store; save NAME ARCHIVE: "
                         "an OCI archive; lock: the exact package versions of bases")
    sp.add_argument("names", nargs="*", help="base or image names (add/save: NAME then the file; pull: REF [NAME])")
    sp.add_argument("--ref", help="add: which image of a multi-image OCI layout or archive")
    input_arg(sp, "--harbor", kind="harbor_source", nargs="*",
              help="build: also the derived bases these Harbor task folders' Dockerfiles need")
    output_arg(sp, "--cache", dir=True, help="image cache (default $TERMFORGE_IMAGE_CACHE, else the user cache)")
    output_arg(sp, "--store", dir=True, help="image store (default $TERMFORGE_IMAGE_STORE, else <cache>/store)")
    sp.set_defaults(func=cmd_images)

    sp = sub.add_parser("eval-table", help="merge eval records into the tidy results table")
    input_arg(sp, "--records", kind="eval_record", nargs="+", required=True,
              help="the eval record JSONs of eval-aime and eval-tbench (every model and benchmark)")
    output_arg(sp, "--out", required=True, help="results.csv (metrics.json is written beside it)")
    sp.set_defaults(func=cmd_eval_table)

    sp = stage("hints", "one leak-gated, method-level hint per kept task (demos.parquet)")
    input_arg(sp, "--corpus", kind="corpus_manifest", required=True, help="corpus manifest of kept tasks")
    output_arg(sp, "--out-dir", dir=True, required=True, help="where demos.parquet and coverage.json go")
    sp.set_defaults(func=cmd_hints)

    sp = sub.add_parser("report", help="the run report: one self-contained HTML page plus CSV tables and PNG plots")
    input_arg(sp, "--results", kind="results_dir", default="results",
              help="the run's results folder to report on (default: %(default)s)")
    output_arg(sp, "--out", default="results/report.html", help="the HTML page (default: %(default)s)")
    output_arg(sp, "--tables", dir=True, default="results/report",
               help="where the CSV tables and PNG plots go (default: %(default)s)")
    sp.add_argument("--gpu-rules", nargs="*", default=list(GPU_RULES), help="rules billed as GPU hours")
    sp.set_defaults(func=cmd_report)

    sp = sub.add_parser("dag", help="draw the rule graph and the job DAG (SVG, PNG, dot; mermaid)")
    output_arg(sp, "--out", dir=True, default="docs/dag",
               help="where rulegraph and jobs .dot/.svg/.png go (default: %(default)s)")
    input_arg(sp, "--configfile", kind="config", nargs="+", default=None, help=CONFIGFILE_HELP)
    output_arg(sp, "--mermaid", help="also write the rule graph as mermaid to this file")
    input_arg(sp, "--readme", kind="text", help="also refresh the `dvc dag --md` block of this README")
    sp.set_defaults(func=cmd_dag)

    sp = sub.add_parser("plan", help="project token use and API cost of a run before anything is spent")
    input_arg(sp, "--configfile", kind="config", nargs="+", default=[], help=CONFIGFILE_HELP)
    output_arg(sp, "--json", help="also write the estimate as JSON")
    sp.set_defaults(func=cmd_plan)

    sp = sub.add_parser("combine", help="merge corpus manifests: balanced (SFT) or union (RL)")
    input_arg(sp, "--manifests", kind="any_corpus_manifest", nargs="+", required=True,
              help="the corpus manifests to merge (results/corpus/manifest.json of several runs)")
    sp.add_argument("--mode", choices=["balanced", "union"], required=True,
                    help="union: every kept task once; balanced: the same number of tasks per value of --axis")
    sp.add_argument("--axis", default="domain",
                    help="balanced: the signature axis whose values get equal shares (default: %(default)s)")
    sp.add_argument("--seed", type=int, default=0,
                    help="balanced: seed of the choice of tasks kept per value (default: %(default)s)")
    output_arg(sp, "--out", required=True, help="the merged corpus manifest JSON")
    sp.set_defaults(func=cmd_combine)

    sp = sub.add_parser("dvc-yaml", help="print dvc.yaml for the workflow (stages, params, outs)")
    input_arg(sp, "--configfile", kind="config", nargs="+", default=[], help=CONFIGFILE_HELP)
    sp.set_defaults(func=cmd_dvc_yaml)

    sp = sub.add_parser("dvc-receipt", help="record the sha256 of a DVC stage's Snakemake targets (dvc.yaml runs it)")
    sp.add_argument("--stage", required=True, help="the DVC stage")
    input_arg(sp, "--targets", kind="text", nargs="+", required=True, help="the files the stage's Snakemake call built")
    output_arg(sp, "--out", required=True, help="dvc-receipts/<stage>.json")
    sp.set_defaults(func=cmd_dvc_receipt)

    sp = stage("export", "export the corpus: HF parquet, private table, Harbor task dirs; or (--verifiers) a "
                         "verifiers environment package with prime-rl configs")
    input_arg(sp, "--manifests", kind="shard_manifest", nargs="+", help="shard manifests: export every generated task")
    input_arg(sp, "--corpus", kind="corpus_manifest", help="corpus manifest: export the tasks validation kept")
    output_arg(sp, "--out-dir", dir=True, required=True,
               help="where dataset/, private/, harbor/ and export.json go (--verifiers: the package)")
    input_arg(sp, "--demos", kind="demos", help="demos.parquet from the hints stage")
    sp.add_argument("--verifiers", action="store_true",
                    help="write an installable verifiers environment package (and prime-rl configs) instead")
    sp.add_argument("--oci", action="store_true",
                    help="also write every task's image as OCI (out-dir/oci layout + oci.tar archive; bases stored once)")
    input_arg(sp, "--images-dir", kind="results_dir",
              help="the built task images (results/images): with --oci or --verifiers")
    sp.set_defaults(func=cmd_export)
    return p


def _declared_outputs(sp: argparse.ArgumentParser, args: argparse.Namespace) -> list[str]:
    outputs = []
    for action in sp._actions:
        value = getattr(args, action.dest, None) if getattr(action, "termforge_output", None) else None
        outputs += [str(v) for v in (value if isinstance(value, list) else [value]) if v is not None]
    return outputs


def _output_named(outputs: list[str], *names) -> str | None:
    """The declared output a path from an OSError belongs to: the output itself, the folder it
    lies in, or the output a staging sibling (`.{output}.{random}.partial`) is being written for."""
    from termforge.io import staging_owner

    for name in names:
        if name is None:
            continue
        path = Path(os.fsdecode(name))
        owner = staging_owner(path.name)
        candidates = [path, path.with_name(owner)] if owner else [path]
        for out in outputs:
            if any(c == Path(out) or c.is_relative_to(out) for c in candidates):
                return out
    return None


def _full_output(outputs: list[str], exc: OSError) -> str:
    """The declared output a full disk stopped: one the error names, else the one on the file
    system with the least space left (an input the error may name is never blamed)."""
    from termforge.errors import free_bytes

    return _output_named(outputs, exc.filename, exc.filename2) or \
        min(outputs, key=lambda o: free_bytes(o) or 0, default=str(Path.cwd()))


def _is_write_error(exc: OSError, output: str) -> bool:
    """Whether an OSError about a path of `output` came from writing it: the output itself or a
    staging sibling failed, or the file system is read-only (a folder output is read too)."""
    import errno
    from termforge.io import staging_owner

    name = Path(os.fsdecode(exc.filename))
    return exc.errno == errno.EROFS or name == Path(output) or staging_owner(name.name) is not None


def _write_problem(exc: OSError) -> str:
    """What an OSError met while writing says about the output, in words."""
    import errno

    words = {errno.EROFS: "is on a read-only file system (expected somewhere to write)",
             errno.EACCES: "is not writable (permission denied)", errno.EPERM: "is not writable (operation not permitted)"}
    return words.get(exc.errno) or os_error_problem(exc)


def _stdout_closed() -> bool:
    """Whether stdout is a pipe its reader has closed (`termforge plan | head -2`)."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
    except (AttributeError, ValueError, OSError):  # not a real file (captured output)
        return False
    return any(events & select.POLLERR for _, events in poller.poll(0))


def main(argv: list[str] | None = None) -> int:
    # Every command that runs a local model (solve, evals, training, hint uplift, serving) shares
    # its cores with other jobs on a laptop, CI or a shared node: OpenMP threads must sleep, not
    # spin, when idle. Read once when torch first loads, so set before any command imports it.
    passive_openmp_env()
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        check_inputs(subcommands(parser)[args.command], args)
        status = args.func(args)
        sys.stdout.flush()  # a reader that stopped early is found here, not at interpreter exit
        return status
    except BrokenPipeError:
        if not _stdout_closed():
            raise
        # The reader took what it wanted: no traceback, and nothing more to write (the
        # interpreter's own flush at exit would fail again), with the status a SIGPIPE gives.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except NoSpaceError as exc:
        print(one_line(f"termforge: error: {args.command}: {exc}"), file=sys.stderr)
    except InputError as exc:
        print(one_line(f"termforge: error: {args.command}: {exc}"), file=sys.stderr)
    except TermforgeError as exc:
        print(one_line(f"termforge: error: {exc}"), file=sys.stderr)
    except OSError as exc:
        outputs = _declared_outputs(subcommands(parser)[args.command], args)
        if is_no_space(exc):  # a writer without its own NoSpaceError: name the output, not the file
            print(one_line(f"termforge: error: {args.command}: {NoSpaceError(_full_output(outputs, exc))}"),
                  file=sys.stderr)
            return 2
        output = _output_named(outputs, exc.filename)
        if output is not None and _is_write_error(exc, output):  # named as the user gave it
            print(one_line(f"termforge: error: {args.command}: {show_path(output)}: {_write_problem(exc)}"),
                  file=sys.stderr)
            return 2
        # A file problem no reader anticipated (a vanished folder): still one line naming the
        # file. An OSError without a file is a bug and keeps its traceback.
        if not exc.filename:
            raise
        print(one_line(f"termforge: error: {args.command}: {InputError(exc.filename, os_error_problem(exc))}"),
              file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
