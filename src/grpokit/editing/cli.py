"""``grpokit edit``: Edit-then-Consolidate on a fact set in one command (EtCon, arXiv 2512.04753).

    grpokit edit --facts 50 --out runs/etcon                  # procedural facts, TPSFT, then GRPO
    grpokit edit --facts-file my_edits.jsonl --no-consolidate  # your edits, the edit stage only
    grpokit edit --facts 50 --write-facts facts.jsonl          # only write the procedural fact set

Prints the reliability / generalisation / locality table of every stage (pre-edit, after the
edits, after consolidation) under greedy free generation and writes ``<out>/results.json``.
``--set a.b=value`` overrides the GRPO stage's config (preset ``etcon``).
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(sub) -> argparse.ArgumentParser:
    """Add the ``edit`` subcommand to ``grpokit``'s subparsers."""
    return _add_arguments(sub.add_parser("edit", help="knowledge editing: TPSFT edits, then GRPO consolidation (EtCon)"))


def build_parser() -> argparse.ArgumentParser:
    """The standalone parser of ``grpokit edit`` (same arguments)."""
    return _add_arguments(argparse.ArgumentParser(prog="grpokit edit", description=__doc__.split("\n")[0]))


def _add_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    src = p.add_mutually_exclusive_group()
    src.add_argument("--facts", type=int, default=50, help="number of procedural counterfactual edits (default 50)")
    src.add_argument("--facts-file", help="jsonl of edits (fields of grpokit.editing.facts.Edit)")
    p.add_argument("--seed", type=int, default=0, help="seed of the procedural facts")
    p.add_argument("--write-facts", metavar="FILE", help="write the procedural facts to FILE and stop")
    p.add_argument("--model", default="smollm2-135m-instruct", help="model to edit: embedded name, HF folder or .gguf")
    p.add_argument("--out", default="runs/etcon", help="output folder")
    p.add_argument("--method", default="tpsft", choices=["tpsft", "sft"], help="edit objective (sft: the plain baseline)")
    p.add_argument("--layers", default="4,5,6,7,8", help="decoder layers whose FFN window trains, comma-separated")
    p.add_argument("--module", default="mlp.down_proj", help="module inside a layer whose weight trains")
    p.add_argument("--steps", type=int, default=8, help="updates per edit")
    p.add_argument("--lr", type=float, default=5e-4, help="Adam learning rate of the window")
    p.add_argument("--epsilon", type=float, default=0.2, help="TPSFT trust region")
    p.add_argument("--refresh-every", type=int, default=2, help="TPSFT: refresh pi_old every N updates of an edit (0 = once per edit)")
    p.add_argument("--anchor", default="snapshot", choices=["snapshot", "pre_edit"], help="TPSFT pi_old: per-edit snapshot or the pre-edit model")
    p.add_argument("--no-consolidate", action="store_true", help="skip the GRPO consolidation stage")
    p.add_argument("--format-steps", type=int, default=0,
                   help="SFT steps (batches of 8) on format demonstrations of unrelated facts before GRPO, for a model that never "
                        "writes <answer> \\boxed{} </answer> (0 = none, as in the paper)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="a.b=value", help="override of the GRPO stage (preset etcon)")
    return p


def edit_main(argv: list[str]) -> int:
    """``grpokit edit`` with ``argv`` (the arguments after ``edit``)."""
    return cmd_edit(build_parser().parse_args(argv))


def cmd_edit(a: argparse.Namespace) -> int:
    """Run the command; user mistakes raise ValueError / DataError (printed as one line by ``grpokit``)."""
    from grpokit.editing.editor import EditConfig
    from grpokit.editing.facts import make_facts, read_jsonl, write_jsonl

    edits = read_jsonl(a.facts_file) if a.facts_file else make_facts(a.facts, seed=a.seed)
    if a.write_facts:
        print(f"wrote {len(edits)} edits to {write_jsonl(edits, a.write_facts)}")
        return 0
    try:
        layers = [int(x) for x in a.layers.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--layers {a.layers!r}: give decoder layer indices separated by commas, e.g. 4,5,6") from None
    cfg = EditConfig(method=a.method, layers=layers, module=a.module, steps=a.steps, lr=a.lr, epsilon=a.epsilon,
                     refresh_every=a.refresh_every, anchor=a.anchor)
    cfg.validate()  # before any model is loaded
    if a.format_steps < 0 or (a.format_steps and a.no_consolidate):
        raise ValueError(f"--format-steps {a.format_steps}: give a count >= 0, and only with the consolidation stage (drop --no-consolidate)")
    if not a.no_consolidate:
        from grpokit.config import load_config

        load_config(preset="etcon", overrides=list(a.overrides))  # a bad --set fails here, before the edit stage
    from grpokit.editing.pipeline import run_pipeline, table

    result = run_pipeline(edits, Path(a.out), model_name=a.model, edit=cfg, grpo_overrides=a.overrides,
                          consolidate_stage=not a.no_consolidate, format_steps=a.format_steps)
    print(table(result["stages"]))
    print(f"results: {Path(a.out) / 'results.json'}")
    return 0
