"""The `termforge` command line: one subcommand per stage.

Each stage takes its options either from `--params` (the JSON a Snakemake rule passes: the
config keys that stage reads, see termforge.params) or from `--configfile` (config.yaml and
overlays, validated). Errors a user can fix print one line naming the culprit, no traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from termforge.errors import ConfigError, TermforgeError


def _stage_options(args, stage: str) -> dict:
    from termforge.params import STAGE_KEYS, stage_params

    if args.params and args.configfile:
        raise ConfigError("give either --params or --configfile, not both")
    if args.configfile:
        from termforge.config import load_config

        return stage_params(load_config(args.configfile), stage)
    if not args.params:
        raise ConfigError(f"{stage}: pass --configfile config.yaml (or --params JSON from the workflow)")
    try:
        opts = json.loads(args.params)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"--params is not valid JSON: {exc}") from None
    missing = [k for k in STAGE_KEYS[stage] if k not in opts]
    if missing:
        raise ConfigError(f"--params for {stage} lacks keys: {', '.join(missing)}")
    return opts


def cmd_check_config(args) -> int:
    from termforge.config import load_config, shard_ids

    cfg = load_config(args.files)
    print(f"config OK: run {cfg['run_name']!r}, {cfg['corpus']['n_tasks']} tasks in "
          f"{len(shard_ids(cfg))} shards of {cfg['corpus']['shard_size']}")
    return 0


def cmd_sample_axes(args) -> int:
    from termforge.axes.sampler import axis_balance, sample_signatures, write_signatures, write_stats
    from termforge.axes.taxonomy import load_taxonomy

    o = _stage_options(args, "sample_axes")
    taxonomy = load_taxonomy(o["corpus.taxonomy"])
    domains = o["corpus.domains"] or None
    sigs = sample_signatures(o["corpus.n_tasks"], o["seed"], o["corpus.mix"], taxonomy, domains=domains,
                             anchor_prob=o["corpus.anchor_prob"],
                             new_bucket_weight=o["corpus.sft_v2_new_bucket_weight"])
    write_signatures(args.out, sigs)
    stats = axis_balance(sigs, taxonomy, domains)
    write_stats(args.stats, stats)
    print(f"sample-axes: {len(sigs)} signatures -> {args.out}; balance (exp(H)/N): "
          + ", ".join(f"{k}={v['balance']:.2f}" for k, v in stats["axes"].items() if "balance" in v))
    return 0


def cmd_generate(args) -> int:
    from termforge.generate.stage import run_generate_shard

    o = _stage_options(args, "generate")
    run_generate_shard(Path(args.signatures), int(args.shard), o["corpus.shard_size"], Path(args.tasks_dir),
                       Path(args.out), backend=o["generate.backend"], base_image=o["generate.base_image"],
                       workers=o["generate.workers"])
    return 0


def cmd_export(args) -> int:
    from termforge.export import push_to_hub, run_export

    o = _stage_options(args, "export")
    run_export([Path(m) for m in args.manifests], Path(args.out_dir),
               Path(args.demos) if args.demos else None)
    push_to_hub(Path(args.out_dir), o["export.hf_repo_id"], o["export.hf_token_env"], o["export.hf_private"])
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="termforge", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)

    def stage(name: str, help_: str):
        sp = sub.add_parser(name, help=help_)
        sp.add_argument("--params", help="stage options as JSON (what the Snakemake rule passes)")
        sp.add_argument("--configfile", nargs="+", help="config.yaml and overlays instead of --params")
        return sp

    sp = sub.add_parser("check-config", help="validate config.yaml and overlays")
    sp.add_argument("files", nargs="+")
    sp.set_defaults(func=cmd_check_config)

    sp = stage("sample-axes", "sample task signatures from the taxonomy")
    sp.add_argument("--out", required=True, help="signatures.jsonl")
    sp.add_argument("--stats", required=True, help="per-axis balance JSON")
    sp.set_defaults(func=cmd_sample_axes)

    sp = stage("generate", "generate the task directories of one shard")
    sp.add_argument("--signatures", required=True)
    sp.add_argument("--shard", required=True)
    sp.add_argument("--tasks-dir", required=True)
    sp.add_argument("--out", required=True, help="shard manifest JSON")
    sp.set_defaults(func=cmd_generate)

    sp = stage("export", "export the corpus: HF parquet, private table, Harbor task dirs")
    sp.add_argument("--manifests", nargs="+", required=True)
    sp.add_argument("--out-dir", required=True)
    sp.add_argument("--demos", help="demos.parquet from the hints stage")
    sp.set_defaults(func=cmd_export)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except TermforgeError as exc:
        print(f"termforge: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
