"""Edit-then-Consolidate end to end: pre-edit eval -> sequential edits -> eval -> GRPO consolidation -> eval.

Li et al., "EtCon: Edit-then-Consolidate for Reliable Knowledge Editing", arXiv 2512.04753:
stage 1 writes every fact with TPSFT (:mod:`grpokit.editing.editor`), stage 2 runs grpokit's
own GRPO trainer (preset ``etcon``) on the edit prompts followed by the authors' CoT
instruction, rewarded by :mod:`grpokit.rewards.etcon`. Each stage's model is evaluated under
free generation (:mod:`grpokit.editing.evaluate`) against the pre-edit model's answers. Outputs
in ``out``: ``facts.jsonl``, ``edited/`` (the stage-1 model), ``consolidation.jsonl`` and
``consolidation_heldout.jsonl`` (stage-2 rows), ``grpo/`` (the GRPO run) and ``results.json``.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Optional

from grpokit.data.chat import render_prompt
from grpokit.editing.editor import EditConfig, apply_edits
from grpokit.editing.evaluate import SYSTEM_PROMPT, evaluate, styled
from grpokit.editing.facts import Edit, consolidation_rows, format_demonstrations, write_jsonl

log = logging.getLogger(__name__)

MAX_NEW_TOKENS = {"direct": 24, "cot": 96}


def _write_rows(rows: list[dict], path: Path) -> Path:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    tmp.replace(path)
    return path


def edit_prompts(tokenizer, edits: list[Edit], system_prompt: Optional[str] = SYSTEM_PROMPT) -> list[str]:
    """The chat-rendered direct edit prompts the edit stage trains on."""
    return [render_prompt(tokenizer, styled(e.prompt, "direct"), system_prompt) for e in edits]


def save_model(model, tokenizer, folder: Path) -> Path:
    """save_pretrained of model and tokenizer (a folder ``model.name`` can point at)."""
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def consolidate(model_dir: Path, edits: list[Edit], out: Path, overrides: list[str] = ()) -> Path:
    """Stage 2: the ``etcon`` preset's GRPO run on ``model_dir`` over the edits' rows; returns its final checkpoint folder."""
    from grpokit.config import load_config
    from grpokit.distributed import make_trainer
    from grpokit.trainer.checkpoint import model_source

    rows = _write_rows(consolidation_rows(edits), out / "consolidation.jsonl")
    heldout = _write_rows(consolidation_rows(edits, paraphrases=True) or consolidation_rows(edits), out / "consolidation_heldout.jsonl")
    cfg = load_config(preset="etcon", overrides=[f"model.name={model_dir}", "data.task=null", f"data.path={rows}", f"data.heldout_path={heldout}",
                                                 f"logging.output_dir={out / 'grpo'}", *overrides])
    make_trainer(cfg).train()
    return Path(model_source(str(out / "grpo")))


def format_warmup(model_dir: Path, edits: list[Edit], out: Path, steps: int, lr: float = 2e-5) -> Path:
    """SFT of ``steps`` batches of 8 on :func:`format_demonstrations` (facts no metric asks about); returns the model folder.

    Between the stages, for a model that never writes ``<answer> \\boxed{} </answer>``: EtCon's format
    gate would otherwise give every rollout 0 and GRPO nothing to learn from [inferred, not in the paper].
    """
    from grpokit.config import load_config
    from grpokit.trainer.checkpoint import model_source
    from grpokit.trainer.offline import OfflineTrainer

    rows = _write_rows(format_demonstrations(edits, 8 * steps), out / "format_demonstrations.jsonl")
    cfg = load_config(preset="sft", overrides=[f"model.name={model_dir}", f"data.path={rows}", "data.heldout_fraction=0",
                                               f"data.system_prompt={SYSTEM_PROMPT}", f"train.steps={steps}", f"optim.lr={lr}",
                                               "eval.before=false", "eval.after=false", f"logging.output_dir={out / 'format_sft'}",
                                               f"logging.checkpoint_every={steps}", "logging.progress=false"])
    OfflineTrainer(cfg).train()
    return Path(model_source(str(out / "format_sft")))


def consolidation_stages(edited: Path, edits: list[Edit], out: Path, grpo_overrides: list[str], format_steps: int,
                         measure: Callable[[Path], dict], minutes: dict[str, float]) -> dict[str, dict]:
    """Stage 2 from the edited model folder ``edited``: the optional :func:`format_warmup`, then GRPO (:func:`consolidate`).

    ``measure(folder)`` evaluates the model each step writes; returns ``{"format": ..., "format+grpo": ...}``
    (or ``{"grpo": ...}`` without the warm-up), the rows a caller prefixes with its edit method. Adds
    each step's wall minutes to ``minutes``.
    """
    rows: dict[str, dict] = {}
    prefix = ""
    if format_steps > 0:
        t0 = time.time()
        edited = format_warmup(edited, edits, out, format_steps)
        minutes["format"] = (time.time() - t0) / 60
        rows["format"] = measure(edited)
        prefix = "format+"
    t0 = time.time()
    final = consolidate(edited, edits, out, grpo_overrides)
    minutes["grpo"] = (time.time() - t0) / 60
    rows[prefix + "grpo"] = measure(final)
    return rows


def run_pipeline(edits: list[Edit], out: Path, *, model_name: str = "smollm2-135m-instruct", edit: EditConfig = EditConfig(),
                 grpo_overrides: list[str] = (), consolidate_stage: bool = True, styles: tuple[str, ...] = ("direct", "cot"),
                 max_new_tokens: dict[str, int] = MAX_NEW_TOKENS, progress: bool = True, format_steps: int = 0) -> dict:
    """Run both stages on ``edits`` and return ``{"stages": {name: {style: metrics}}, "edits": [...], "minutes": {...}}``.

    ``format_steps > 0``: :func:`format_warmup` between the stages, evaluated as its own row (``<method>+format``).
    """
    from grpokit.model.loading import load_model

    edit.validate()
    out.mkdir(parents=True, exist_ok=True)
    write_jsonl(edits, out / "facts.jsonl")
    model, tokenizer = load_model(model_name)
    t0 = time.time()
    stages, minutes = {}, {}
    stages["pre-edit"], baseline = evaluate(model, tokenizer, edits, styles, max_new_tokens=max_new_tokens)
    minutes["eval_pre"] = (time.time() - t0) / 60
    t0 = time.time()
    edit_rows = apply_edits(model, tokenizer, edits, edit_prompts(tokenizer, edits), edit, progress=progress)
    minutes["edit"] = (time.time() - t0) / 60
    stages[edit.method], _ = evaluate(model, tokenizer, edits, styles, baseline, max_new_tokens=max_new_tokens)
    result = {"stages": stages, "edit_config": asdict(edit), "edits": edit_rows, "minutes": minutes}
    if consolidate_stage:
        edited = save_model(model, tokenizer, out / "edited")
        del model

        def measure(folder: Path) -> dict:
            trained, trained_tokenizer = load_model(folder)
            return evaluate(trained, trained_tokenizer, edits, styles, baseline, max_new_tokens=max_new_tokens)[0]

        rows = consolidation_stages(edited, edits, out, list(grpo_overrides), format_steps, measure, minutes)
        stages.update({f"{edit.method}+{name}": metrics for name, metrics in rows.items()})
    (out / "results.json").write_text(json.dumps(result, indent=1))
    return result


def table(stages: dict[str, dict[str, dict[str, float]]]) -> str:
    """A markdown table: one row per stage, reliability / generalisation / locality per prompt style."""
    styles = list(next(iter(stages.values())))
    head = "| stage | " + " | ".join(f"{s} {m}" for s in styles for m in ("rel", "gen", "loc")) + " |"
    lines = [head, "|" + "---|" * (1 + 3 * len(styles))]
    for name, by_style in stages.items():
        cells = [f"{by_style[s][m]:.1%}" for s in styles for m in ("reliability", "generalisation", "locality")]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
