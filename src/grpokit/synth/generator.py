"""The generator: procedural plan -> long context -> writer rewrite -> parse -> validate -> record.

Implements the pipeline of "Modular Techniques for Synthetic Long-Context Data Generation in
Language Model Training and Evaluation" (arXiv 2509.01185): a template per paradigm, a
model-agnostic writer client, metadata-enriched outputs for SFT, DPO and GRPO. The paper's code is
not public; everything below the four paradigms is [inferred]:

- item ``i`` is a pure function of ``(seed, paradigm, i)``: its ``random.Random`` is seeded with
  that string and its writer calls with a seed derived from it, so a run, a resumed run and a run
  in another order give the same bytes;
- items are tried in index order until ``n`` pass; one that fails to parse or validate is
  rejected, counted by reason in ``manifest.json`` and listed in ``rejected.jsonl``; the run goes
  on (at most ``max_attempts`` items are tried);
- ``records.jsonl`` (complete records) and ``rejected.jsonl`` grow one whole, flushed line per
  item; a line cut by a crash is dropped when the run resumes, and tried items are skipped. The
  stage files (``sft.jsonl``, ``dpo.jsonl``, ``grpo.jsonl``) and ``manifest.json`` are written
  to a temporary name and renamed;
- ``created_at`` lives in the manifest, not in the records (records are byte-identical per seed).
"""

from __future__ import annotations

import json
import logging
import os
import random
import zlib
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

from grpokit.synth.context import assemble
from grpokit.synth.degrade import degrade
from grpokit.synth.documents import VALUE_KINDS, World
from grpokit.synth.formats import ADAPTERS, FORMATS
from grpokit.synth.paradigms import PARADIGMS, ParseError, resolve
from grpokit.synth.paradigms.base import distractor_values
from grpokit.synth.validators import CHECKS, validate_record
from grpokit.synth.writer import WriterParams, rewrite_messages

log = logging.getLogger(__name__)

PROMPT_MARGIN = 512  # tokens a context leaves for the question, the chat template and the response


class SynthError(ValueError):
    """A synth run that cannot start as asked; the message names the option and the fix."""


@dataclass
class SynthConfig:
    """One ``grpokit synth`` run (every field is a command-line option)."""

    paradigm: str  # dialogue | grounded | verifiable | multi_hop
    out: str  # output folder
    n: int = 8  # items to produce (accepted ones)
    templates: list = field(default_factory=list)  # template ids to cycle through ([] = all of the paradigm)
    target_tokens: int = 4096  # the context is at least this long, in tokens of `tokenizer`
    seed: int = 0  # run seed: item i depends only on (seed, paradigm, i)
    writer: str = "smollm2-135m-instruct"  # writer LM: local model, vllm:<model>, or none (drafts only)
    tokenizer: str = "smollm2-135m-instruct"  # the policy's tokenizer that measures contexts
    min_gap_tokens: int = 256  # multi_hop: consecutive evidence spans at least this many tokens apart
    n_turns: int = 3  # dialogue: user/assistant turns
    max_new_tokens: int = 160  # writer: tokens per rewrite
    temperature: float = 0.7  # writer: sampling temperature (0 = greedy)
    max_attempts: int = 0  # items tried at most (0 = 10 * n)
    progress: bool = True  # a rich progress bar

    def identity(self) -> dict:
        """The settings a resumed run must share with the run it continues (all but n, max_attempts, progress)."""
        return {k: v for k, v in asdict(self).items() if k not in ("n", "max_attempts", "progress", "out")}


def check_config(cfg: SynthConfig) -> list[str]:
    """The template ids to use; a one-line SynthError for an unknown paradigm / template or a bad number."""
    try:
        templates = resolve(cfg.paradigm, cfg.templates)
    except ValueError as exc:
        raise SynthError(str(exc)) from None
    for name, low in (("n", 1), ("target_tokens", 64), ("n_turns", 1), ("max_new_tokens", 1)):
        if getattr(cfg, name) < low:
            raise SynthError(f"--{name.replace('_', '-')} {getattr(cfg, name)}: must be at least {low}")
    if cfg.paradigm == "dialogue" and cfg.n_turns > 4:
        raise SynthError(f"--n-turns {cfg.n_turns}: dialogues have 1 to 4 turns")
    if cfg.paradigm == "multi_hop" and cfg.min_gap_tokens * 3 > cfg.target_tokens:
        raise SynthError(f"--min-gap-tokens {cfg.min_gap_tokens}: evidence segments cannot be that far apart in a "
                         f"{cfg.target_tokens}-token context; use at most {cfg.target_tokens // 3}")
    return templates


def context_limit(source: str) -> Optional[int]:
    """Tokens the model ``source`` reads, as its GGUF metadata or config states (:func:`grpokit.model.context.context_length`).

    A model source that cannot be read is a one-line SynthError naming ``--tokenizer`` / ``--writer``.
    """
    from grpokit.model.context import context_length
    from grpokit.model.loading import ModelLoadError

    try:
        return context_length(source)
    except ModelLoadError as exc:
        raise SynthError(str(exc)) from None


def check_length(cfg: SynthConfig, limits: dict[str, Optional[int]]) -> None:
    """One line when a context of ``target_tokens`` (+ the prompt margin) does not fit a model's context."""
    for what, limit in limits.items():
        if limit is not None and cfg.target_tokens + PROMPT_MARGIN > limit:
            raise SynthError(
                f"--target-tokens {cfg.target_tokens}: with {PROMPT_MARGIN} tokens for the question and response it exceeds "
                f"the {limit}-token context of {what}; use --target-tokens <= {limit - PROMPT_MARGIN} or a longer-context model"
            )


class Generator:
    """``Generator(cfg, writer, tokenizer)``: ``writer`` a callable ``(messages, WriterParams) -> text`` or None (drafts)."""

    def __init__(self, cfg: SynthConfig, writer: Any, tokenizer: Any) -> None:
        self.cfg, self.writer, self.tokenizer = cfg, writer, tokenizer
        self.templates = check_config(cfg)
        limits = {f"tokenizer '{cfg.tokenizer}'": context_limit(cfg.tokenizer)}
        if writer is not None:
            limits[f"writer '{getattr(writer, 'name', cfg.writer)}'"] = getattr(writer, "max_context", None)
        check_length(cfg, limits)
        self.writer_name = "none" if writer is None else str(getattr(writer, "name", cfg.writer))

    # ------------------------------------------------------------------ one item
    def item(self, index: int) -> tuple[Optional[dict], str]:
        """(record, "") for a valid item ``index``, else (None, the reason it was rejected)."""
        cfg = self.cfg
        key = f"{cfg.seed}:{cfg.paradigm}:{index}"
        rng = random.Random(key)
        template_id = self.templates[index % len(self.templates)]
        world = World(rng)
        plan = PARADIGMS[cfg.paradigm][template_id](world, rng, {"min_gap_tokens": cfg.min_gap_tokens, "n_turns": cfg.n_turns})
        ctx = assemble(plan.sources, plan.placement, world.distractors(), self.tokenizer, cfg.target_tokens)
        turns = plan.turns(ctx)
        messages: list[dict] = []
        for k, turn in enumerate(turns):
            messages.append({"role": "user", "content": f"{ctx.text}\n\n{turn.question}" if k == 0 else turn.question})
            if self.writer is None:
                response = turn.draft
            else:
                params = WriterParams(cfg.max_new_tokens, cfg.temperature, seed=zlib.crc32(f"{key}:{k}".encode()))
                try:
                    response = turn.parse(self.writer(rewrite_messages(turn.rewrite, turn.draft), params))
                except ParseError as exc:
                    return None, f"unparsable: {exc}"
            messages.append({"role": "assistant", "content": response + turn.suffix})
        last = turns[-1]
        wrong = plan.extra.get("wrong") or distractor_values(
            ctx, plan.wrong_kind or VALUE_KINDS[last.evidence[-1][1].relation], {str(last.verifier.get("answer"))})
        rejected, degradation = degrade(messages[-1]["content"], last.verifier, wrong, rng)
        spans = [dict(ctx.evidence(doc, fact), turn=k) for k, t in enumerate(turns) for doc, fact in t.evidence]
        record = {
            "id": f"{cfg.paradigm}-{cfg.seed}-{index}", "paradigm": cfg.paradigm, "template_id": template_id,
            "context": ctx.text, "messages": messages, "turn_verifiers": [t.verifier for t in turns],
            "verifier": last.verifier, "response": messages[-1]["content"], "rejected": rejected, "degradation": degradation,
            "evidence_spans": spans,
            "metadata": {
                "paradigm": cfg.paradigm, "template_id": template_id, "generator_model": self.writer_name,
                "tokenizer": cfg.tokenizer, "context_tokens": ctx.n_tokens, "target_tokens": cfg.target_tokens,
                "segment_offsets": [s.offsets() for s in ctx.segments],
                "evidence_positions": [[s["token_start"], s["token_end"]] for s in spans],
                "min_gap_tokens": cfg.min_gap_tokens if cfg.paradigm == "multi_hop" else 0,
                "difficulty": plan.difficulty, "n_turns": len(turns), "seed": cfg.seed, "item": index,
            },
        }
        problems = validate_record(record, self.tokenizer)
        if problems:
            return None, f"invalid: {problems[0]}"
        record["metadata"]["validation"] = {"passed": True, "checks": list(CHECKS)}
        return record, ""

    # ------------------------------------------------------------------ the run
    def run(self) -> dict:
        """Produce ``cfg.n`` records in ``cfg.out`` (resuming what is there); returns the manifest."""
        cfg = self.cfg
        out = Path(cfg.out)
        out.mkdir(parents=True, exist_ok=True)
        records_path, rejected_path, manifest_path = out / "records.jsonl", out / "rejected.jsonl", out / "manifest.json"
        if manifest_path.exists():
            previous = json.loads(manifest_path.read_text())
            if previous.get("config") != cfg.identity():
                raise SynthError(f"{out} holds a synth run with other settings ({manifest_path}); use another --out or the same settings")
        records, rejected = _read_complete(records_path), _read_complete(rejected_path)
        _write_atomic(manifest_path, json.dumps(self._manifest(records, rejected, "running"), indent=2, sort_keys=True) + "\n")
        tried = {r["metadata"]["item"] for r in records} | {r["item"] for r in rejected}
        limit = cfg.max_attempts or 10 * cfg.n
        from grpokit.trainer.progress import ItemProgress

        bar = ItemProgress(cfg.n, f"synth {cfg.paradigm}", initial=min(len(records), cfg.n), enabled=cfg.progress)
        index = 0
        with records_path.open("a", encoding="utf-8") as rec_f, rejected_path.open("a", encoding="utf-8") as rej_f:
            while len(records) < cfg.n and index < limit:
                if index not in tried:
                    record, reason = self.item(index)
                    if record is not None:
                        records.append(record)
                        _append(rec_f, record)
                        bar.update(1)
                    else:
                        rejected.append({"item": index, "reason": reason})
                        _append(rej_f, rejected[-1])
                        bar.note(f"rejected {len(rejected)}")
                index += 1
        bar.close()
        records.sort(key=lambda r: r["metadata"]["item"])
        for fmt in FORMATS:
            _write_atomic(out / f"{fmt}.jsonl", "".join(_line(ADAPTERS[fmt](r)) for r in records[: cfg.n]))
        manifest = self._manifest(records[: cfg.n], rejected, "done" if len(records) >= cfg.n else "incomplete")
        _write_atomic(manifest_path, json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        if len(records) < cfg.n:
            log.warning("%d of %d items after %d attempts (%d rejected; reasons in %s)", len(records), cfg.n, limit, len(rejected), rejected_path)
        return manifest

    def _manifest(self, records: list[dict], rejected: list[dict], status: str) -> dict:
        reasons: dict[str, int] = {}
        for r in rejected:
            key = r["reason"].split(":")[0] + (": " + r["reason"].split(":")[1].strip() if r["reason"].startswith("invalid") else "")
            reasons[key] = reasons.get(key, 0) + 1
        tokens = [r["metadata"]["context_tokens"] for r in records]
        return {
            "config": self.cfg.identity(), "status": status, "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "accepted": len(records), "rejected": len(rejected), "rejected_by_reason": reasons,
            "context_tokens": {"min": min(tokens), "max": max(tokens)} if tokens else {},
            "files": [f"{f}.jsonl" for f in FORMATS],
        }


def _line(obj: dict) -> str:
    return json.dumps(obj, ensure_ascii=False, sort_keys=True) + "\n"


def _append(f, obj: dict) -> None:
    f.write(_line(obj))
    f.flush()
    os.fsync(f.fileno())


def _read_complete(path: Path) -> list[dict]:
    """The whole lines of ``path``; a cut last line (a crash mid-write) is removed from the file."""
    if not path.exists():
        return []
    raw = path.read_text(encoding="utf-8")
    lines = raw.splitlines(keepends=True)
    keep, rows = [], []
    for i, line in enumerate(lines):
        try:
            rows.append(json.loads(line))
            keep.append(line)
        except json.JSONDecodeError:
            if i < len(lines) - 1 or line.endswith("\n"):
                raise SynthError(f"{path}: line {i + 1} is corrupted inside the file; remove it or use another --out") from None
    if "".join(keep) != raw:
        log.info("dropped a cut last line of %s", path)
        _write_atomic(path, "".join(keep))
    return rows


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
