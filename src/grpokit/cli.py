"""The ``grpokit`` command line: train | eval | demo | list."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Optional

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

log = logging.getLogger("grpokit")


HEAVY_COMMANDS = ("train", "demo", "eval", "rm", "edit")  # commands that run a model: worth MKL's AVX2 kernels


class UserError(Exception):
    """A mistake the user can fix; printed as one line, exit code 2."""


def _add_config_args(p: argparse.ArgumentParser, config_required: bool) -> None:
    p.add_argument("config", nargs=None if config_required else "?", help="YAML config file")
    p.add_argument("--preset", help="start from a packaged preset (see `grpokit list`)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="a.b=value",
                   help="override one field, e.g. --set train.steps=10 (repeatable)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="grpokit", description="GRPO post-training for causal LMs")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("train", help="train with GRPO")
    _add_config_args(p, config_required=False)
    p.add_argument("--resume", action="store_true", help="continue from the last checkpoint in logging.output_dir")
    p.add_argument("--stage", help="grpo (default), or an offline stage on a dataset of given completions: sft, dpo, kto (sets `stage`)")
    p = sub.add_parser("demo", help="the default demo: SmolLM2-135M-Instruct on arithmetic")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="a.b=value")
    p.add_argument("--resume", action="store_true")
    p = sub.add_parser("eval", help="held-out greedy accuracy (and mean@k / pass@k) of a model or checkpoint")
    _add_config_args(p, config_required=False)
    p.add_argument("--model", help="model to evaluate: checkpoint folder, HF folder, .gguf or embedded name")
    p.add_argument("--k", type=int, default=1, help="k > 1 also samples k completions per prompt: mean@k and pass@k (accuracy stays greedy)")
    p.add_argument("--limit", type=int, default=None, help="evaluate only the first N held-out prompts")
    p = sub.add_parser("list", help="registered variants, rewards, tasks, presets and policy families")
    p.add_argument("--markdown", action="store_true", help="print the docs' markdown tables instead (python -m grpokit.docs_tables)")
    p = sub.add_parser("rm", help="reward models: `grpokit rm train --help`")
    p.add_argument("rm_args", nargs=argparse.REMAINDER, help="train ...")
    from grpokit.synth.cli import add_parser as add_synth_parser

    add_synth_parser(sub)
    from grpokit.editing.cli import add_parser as add_edit_parser

    add_edit_parser(sub)
    return parser


def _load(args):
    """The validated Config of a command's CONFIG / --preset / --set arguments."""
    from grpokit.config import load_config

    stage = [f"stage={args.stage}"] if getattr(args, "stage", None) else []  # --stage wins over the file and --set
    return load_config(getattr(args, "config", None), getattr(args, "preset", None), args.overrides + stage)


def cmd_train(args) -> int:
    from grpokit.distributed import MissingExtraError, make_trainer

    cfg = _load(args)
    from grpokit.trainer.metrics import report_backends

    report_backends(cfg.logging.report_to, cfg.logging.tensorboard)  # a tracker not installed: one line, before any load
    if args.resume:  # before any model load: a run that cannot resume must not start over its checkpoints
        from pathlib import Path

        from grpokit.trainer.checkpoint import require_checkpoint

        require_checkpoint(Path(cfg.logging.output_dir) / "checkpoints")  # CheckpointError(ValueError): one line
    if cfg.stage != "grpo":  # SFT / DPO / KTO on given completions: the offline loop
        from grpokit.trainer.offline import OfflineTrainer

        summary = OfflineTrainer(cfg).train(resume=args.resume)
        _print_offline_summary(summary)
        return 0
    try:
        trainer = make_trainer(cfg)  # Ray rollout workers when distributed.rollout_workers > 0
    except MissingExtraError as exc:
        raise UserError(str(exc)) from None
    summary = trainer.train(resume=args.resume)
    _print_summary(summary)
    return 0


def cmd_demo(args) -> int:
    args.config, args.preset = None, "demo"
    return cmd_train(args)


def _print_summary(summary: dict) -> None:
    before = summary["before"]["accuracy"] if summary.get("before") else float("nan")
    after = summary["after"]["accuracy"] if summary.get("after") else float("nan")
    print(f"report: {summary['report']}")
    print(f"heldout_accuracy before={before:.4f} after={after:.4f} minutes={summary['train_minutes']:.2f}")


def _print_offline_summary(summary: dict) -> None:
    print(f"report: {summary['report']}")
    for split in ("train", "heldout"):
        before, after = summary["before"].get(split), summary["after"].get(split)
        if before and after:
            keys = [k for k in ("loss", "rewards/margins", "accuracy") if k in before and k in after]
            print(f"{summary['stage']} {split} " + " ".join(f"{k} before={before[k]:.4f} after={after[k]:.4f}" for k in keys))
    print(f"steps={summary['steps']} minutes={summary['train_minutes']:.2f}")


def cmd_eval(args) -> int:
    """Held-out accuracy as training's evaluation measures it: the same function, and for an environment
    run the same episodes (``environment`` section, held-out seeds) as the trainer's ``evaluate``."""
    from grpokit.envs.checks import environment_problem, rows_problem
    from grpokit.envs.episodes import episode_backend
    from grpokit.rollout.hf import HFBackend
    from grpokit.trainer import setup
    from grpokit.trainer.evaluation import evaluate_accuracy

    if args.k < 1:
        raise UserError(f"--k {args.k}: the number of samples per prompt must be at least 1")
    cfg = _load(args)
    splits = setup.build_splits(cfg.data)
    rows = splits.heldout[: args.limit] if args.limit else splits.heldout
    rewards = setup.build_rewards(cfg.rewards)
    judge = setup.accuracy_judge(cfg, rewards)  # eval.accuracy_reward naming no reward: one line
    problem = environment_problem(cfg) or rows_problem(cfg, {"heldout": rows})  # before the model loads
    if problem is not None:
        raise UserError(problem)
    source = args.model or cfg.model.name
    family = _eval_family(cfg, source)
    if family != "causal_lm":  # the sampler below is the text LM's; a family's own evaluation runs inside its training run
        raise UserError(f"grpokit eval samples text causal LMs; {source!r} is a {family} model: its held-out accuracy "
                        "before and after training is in its run's eval.jsonl (eval.before / eval.after)")
    model, tokenizer = _load_for_eval(source, cfg.model.dtype)
    result = evaluate_accuracy(
        episode_backend(HFBackend(model, tokenizer), cfg), rows, setup.render_all(tokenizer, rows, cfg.data.system_prompt), judge,
        batch_size=cfg.eval.batch_size, max_new_tokens=cfg.eval.max_new_tokens, k=args.k,
        temperature=cfg.rollout.temperature,
    )
    print(" ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in result.items()))
    return 0


def _eval_family(cfg, source: str) -> str:
    """The policy family of the model ``grpokit eval`` scores (``model.family`` or the family claiming ``source``)."""
    import dataclasses
    from pathlib import Path

    from grpokit.trainer.inputs import run_family

    if (Path(source) / "adapter_config.json").is_file():  # a LoRA checkpoint of a text LM (its base is named inside)
        return "causal_lm"
    return run_family(dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, name=source))).name


def _load_for_eval(source: str, dtype: str):
    """A checkpoint may hold a LoRA adapter: load its base and attach it."""
    import json
    from pathlib import Path

    from grpokit.model.loading import load_model

    adapter_cfg = Path(source) / "adapter_config.json"
    if adapter_cfg.is_file():
        from peft import PeftModel

        base = json.loads(adapter_cfg.read_text()).get("base_model_name_or_path")
        if not base:  # never a guessed base: the adapter's weights mean nothing on another model
            raise ValueError(f"{adapter_cfg} names no base_model_name_or_path: set it to the model the adapter was trained on "
                             "(an embedded name, a model folder or a Hub id)")
        model, tokenizer = load_model(base, dtype=dtype)
        return PeftModel.from_pretrained(model, source), tokenizer
    return load_model(source, dtype=dtype)


def cmd_list(args) -> int:
    """Every registered name of every axis, every preset and every policy family, with one line each."""
    if getattr(args, "markdown", False):
        from grpokit.docs_tables import markdown

        print(markdown())
        return 0
    from rich.console import Console
    from rich.table import Table

    from grpokit.config import preset_names
    from grpokit.config.loading import read_preset
    from grpokit.families import FAMILIES
    from grpokit.registries import AXES, get_registry

    table = Table(title="grpokit: registered names")
    table.add_column("axis")
    table.add_column("name")
    table.add_column("what it is")
    for axis in AXES:
        reg = get_registry(axis)
        for name in reg.names():
            table.add_row(axis, name, reg.summary(name))
    for name in preset_names():
        table.add_row("preset", name, str(read_preset(name).get("description", "")))
    for family in FAMILIES:  # model.family, or the family that claims model.name (docs/families/)
        embedded = f" (embedded: {', '.join(family.embedded)})" if family.embedded else ""
        table.add_row("family", family.name, family.description + embedded)
    Console().print(table)
    return 0


def cmd_rm(args) -> int:
    if not args.rm_args or args.rm_args[0] != "train":
        raise UserError("usage: grpokit rm train --kind regression|pairwise --data FILE ... (see grpokit rm train --help)")
    from grpokit.rm_cli import rm_train_main

    return rm_train_main(args.rm_args[1:])


def cmd_edit(args) -> int:
    from grpokit.editing.cli import cmd_edit as run_edit

    return run_edit(args)


def cmd_synth(args) -> int:
    from grpokit.synth.cli import cmd_synth as run_synth

    return run_synth(args)


def _requested_device(args) -> str:
    """``model.device`` of the command's config, read from the raw YAML before torch is imported.

    Only for deciding the MKL restart: no validation ('auto' when unreadable; loading the config
    later reports the mistake). Same precedence as ``load_config``: preset <- file <- ``--set``.
    """
    if args.command == "rm":
        return "cpu"  # reward-model training runs its encoder on the CPU
    from grpokit.config.loading import raw_config

    try:
        preset = "demo" if args.command == "demo" else getattr(args, "preset", None)
        data = raw_config(getattr(args, "config", None), preset, args.overrides)
        device = (data.get("model") or {}).get("device", "auto")
    except Exception:  # noqa: BLE001 -- a broken config is reported by the real load
        return "auto"
    return str(device)


COMMANDS = {"train": cmd_train, "demo": cmd_demo, "eval": cmd_eval, "list": cmd_list, "rm": cmd_rm, "synth": cmd_synth, "edit": cmd_edit}


def main(argv: Optional[list[str]] = None) -> int:
    from grpokit.plugins import working_folder_importable

    working_folder_importable()  # a config's module:Name resolves from the working folder, as under python -m (no PYTHONPATH=.)
    args = build_parser().parse_args(argv)
    if argv is None and args.command in HEAVY_COMMANDS:
        from grpokit.mkl_amd import reexec_with_shim

        # MKL's AVX2 GEMMs on AMD CPUs: restarts this command once when it runs on the CPU (GRPOKIT_MKL_AMD=0: off)
        reexec_with_shim(device=_requested_device(args))
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    for noisy in ("httpx", "transformers", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    from grpokit.mkl_amd import active

    if active():
        log.info("MKL uses its AVX2 kernels on this AMD CPU (LD_PRELOAD shim; GRPOKIT_MKL_AMD=0 turns it off)")
    from grpokit.config import ConfigError

    user_errors: tuple = (UserError, ConfigError, FileNotFoundError)
    try:
        from grpokit.data.files import DataError
        from grpokit.envs.pool import EnvironmentFailure
        from grpokit.model.loading import ModelLoadError
        from grpokit.rewards import RewardError, RewardLoadError

        from grpokit.rollout.vllm import WeightSyncError

        user_errors += (DataError, ModelLoadError, RewardLoadError, RewardError, WeightSyncError, EnvironmentFailure)
    except ImportError:
        pass
    try:
        return COMMANDS[args.command](args)
    except user_errors as exc:
        print(f"grpokit: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("grpokit: interrupted; continue with the same command and --resume", file=sys.stderr)
        return 130
    except ValueError as exc:
        if args.verbose:
            raise
        print(f"grpokit: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
