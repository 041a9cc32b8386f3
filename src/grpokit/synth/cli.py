"""``grpokit synth``: generate synthetic long-context data (arXiv 2509.01185) for SFT, DPO and GRPO."""

from __future__ import annotations

import argparse

from grpokit.synth.generator import SynthConfig

PARADIGM_HELP = "dialogue, grounded, verifiable or multi_hop"


def add_parser(sub) -> None:
    """The ``synth`` subcommand's options (one per :class:`SynthConfig` field)."""
    d = SynthConfig(paradigm="", out="")
    p = sub.add_parser("synth", help="synthetic long-context data: dialogue, grounded, verifiable, multi_hop (SFT/DPO/GRPO files)")
    p.add_argument("--paradigm", required=True, help=PARADIGM_HELP)
    p.add_argument("--out", required=True, help="output folder (records.jsonl, sft/dpo/grpo.jsonl, manifest.json); an existing run there resumes")
    p.add_argument("--n", type=int, default=d.n, help="items to produce (valid ones)")
    p.add_argument("--template", dest="templates", action="append", default=[], help="template id (repeatable; default: all of the paradigm)")
    p.add_argument("--target-tokens", type=int, default=d.target_tokens, help="context length at least, in tokens of --tokenizer")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--writer", default=d.writer, help="writer LM: local model (embedded name, HF folder, .gguf), vllm:<model>, or none (procedural drafts)")
    p.add_argument("--tokenizer", default=d.tokenizer, help="the policy's tokenizer, which measures contexts")
    p.add_argument("--min-gap-tokens", type=int, default=d.min_gap_tokens, help="multi_hop: evidence segments at least this many tokens apart")
    p.add_argument("--n-turns", type=int, default=d.n_turns, help="dialogue: user/assistant turns (1-4)")
    p.add_argument("--max-new-tokens", type=int, default=d.max_new_tokens, help="writer: tokens per rewrite")
    p.add_argument("--temperature", type=float, default=d.temperature, help="writer: sampling temperature (0 = greedy)")
    p.add_argument("--max-attempts", type=int, default=d.max_attempts, help="items tried at most (0 = 10 x --n)")
    p.add_argument("--device", default="cpu", help="device of a local writer model (cpu, cuda)")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")


def cmd_synth(args: argparse.Namespace) -> int:
    from grpokit.model.loading import load_tokenizer
    from grpokit.synth.generator import Generator, check_config, check_length, context_limit
    from grpokit.synth.writer import make_writer

    fields = {k: getattr(args, k) for k in SynthConfig.__dataclass_fields__ if hasattr(args, k)}
    cfg = SynthConfig(**fields)
    check_config(cfg)  # unknown paradigm / template: one line before any model loads
    check_length(cfg, {f"tokenizer '{cfg.tokenizer}'": context_limit(cfg.tokenizer)})  # before any model loads
    tokenizer = load_tokenizer(cfg.tokenizer)
    writer = make_writer(cfg.writer, device=args.device)
    manifest = Generator(cfg, writer, tokenizer).run()
    tokens = manifest["context_tokens"]
    print(f"synth {cfg.paradigm}: {manifest['accepted']} items in {cfg.out} ({manifest['rejected']} rejected: "
          f"{manifest['rejected_by_reason'] or 'none'}); context tokens {tokens.get('min')}-{tokens.get('max')}")
    return 0 if manifest["accepted"] >= cfg.n else 1
