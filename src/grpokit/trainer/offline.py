"""The offline training loop, top to bottom: SFT, DPO or KTO on a dataset of given completions.

One step: the next ``offline.batch_size`` examples (seeded epochs, resumable) -> for KTO, the
policy's and the reference's log-probs of the step's mismatched pairs (no gradient; the
reference point) -> micro-batches of at most ``train.micro_batch_size`` sequences (a DPO pair
never split): the reference's log-probs (no gradient) and the policy's through
``Policy.learn_forward`` -- the chunked LM head, the shared prompt forward per group and StreamBP
when ``train.sequence_chunk > 0``, so the memory properties of the GRPO learner carry over -- then
the registered offline loss and its backward -> reference sync when due (the pre-update weights,
as HALOs) -> clipped optimizer step. The model loading, optimizer, schedule, checkpoints,
``metrics.jsonl`` and progress bar are the GRPO loop's. Departures from TRL: none in the losses;
the held-out and training-row evaluations (loss, implicit-reward margins, and greedy accuracy
when the held-out rows have answers) run before and after training, and every ``eval.every`` steps.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any, Optional

import torch

from grpokit.algos.offline import OFFLINE_LOSSES, OfflineInputs
from grpokit.config.loading import dump_yaml
from grpokit.config.schema import Config
from grpokit.data.offline import Example, encode, load_offline_splits
from grpokit.data.sampler import PromptSampler
from grpokit.model.grad_sinks import in_place_embedding_grads
from grpokit.registry import Spec, call_with
from grpokit.rollout.types import RolloutBatch
from grpokit.trainer import checkpoint as ckpt_io
from grpokit.trainer import setup
from grpokit.trainer.inputs import RunContractError, run_family
from grpokit.trainer.memory import allocate_gradients, tune_malloc
from grpokit.trainer.metrics import RunLogger
from grpokit.trainer.progress import StepProgress

log = logging.getLogger(__name__)

EVAL_ROWS = 256  # rows of each split scored by the offline evaluation [inferred]: bounded cost


def offline_spec(cfg: Config) -> Spec:
    """The registered objective of an offline run, with every load-time check of the run (one-line errors)."""
    if cfg.stage == "grpo":
        raise RunContractError("stage 'grpo' is the online loop: use grpokit.trainer.loop.Trainer (grpokit train picks it)")
    off = cfg.offline
    name = off.loss or cfg.stage
    unread = _algorithm_fields_set(cfg)
    if unread:
        raise RunContractError(f"algorithm.{unread[0]} is set, but stage '{cfg.stage}' trains the offline objective, which reads "
                               "no algorithm.* field (its settings are offline.*): drop it or run stage=grpo")
    spec = OFFLINE_LOSSES.spec(name)
    if spec.stage != cfg.stage:
        fits = [n for n in OFFLINE_LOSSES.names() if OFFLINE_LOSSES.spec(n).stage == cfg.stage]
        raise RunContractError(f"offline.loss '{name}' trains on {spec.stage} data but stage is '{cfg.stage}': set offline.loss to one of {', '.join(fits)} or stage={spec.stage}")
    try:
        OFFLINE_LOSSES.check_options(name, off.loss_options, "offline.loss_options")
        _dry_run(spec, off.loss_options, off.beta)  # option values the function refuses (a band without 0 inside)
    except (ValueError, TypeError) as exc:
        raise RunContractError(str(exc) if str(exc).startswith("offline.") else f"offline.loss_options: {exc}") from None
    sync = sync_period(cfg, spec)
    if sync and "ref_logp" not in spec.inputs:
        raise RunContractError(f"offline.ref_sync_every={sync}: offline.loss '{name}' uses no reference model; set it to 0")
    if sync and cfg.model.lora.enabled:
        raise RunContractError("offline.ref_sync_every needs a full fine-tune (the LoRA reference is the adapter-free base): set model.lora.enabled=false or offline.ref_sync_every=0")
    if "kl_logp" in spec.inputs and off.batch_size < 2:
        raise RunContractError("offline.batch_size must be >= 2 for KTO: its reference point pairs each prompt with another row's completion")
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise RunContractError("offline stages run in one process: launch without torchrun")
    if cfg.train.streaming_problem():
        raise RunContractError(cfg.train.streaming_problem())
    return spec


def _algorithm_fields_set(cfg: Config) -> list[str]:
    """The ``algorithm.*`` fields ``cfg`` sets away from their defaults: the online loop's, read by no offline stage."""
    from dataclasses import fields

    default = type(cfg.algorithm)()
    return [f.name for f in fields(default) if getattr(cfg.algorithm, f.name) != getattr(default, f.name)]


def sync_period(cfg: Config, spec: Spec) -> int:
    """``offline.ref_sync_every``, or the objective's own period when it is null (humanline: 1)."""
    every = cfg.offline.ref_sync_every
    return spec.ref_sync_every if every is None else every


def _dry_run(spec: Spec, options: dict, beta: float) -> None:
    """Call the objective once on a 2-row dummy batch, so an option value it refuses fails at load."""
    zeros = torch.zeros(2, 1, device="cpu")
    inp = OfflineInputs(logp=zeros, mask=torch.ones(2, 1, device="cpu"), ref_logp=zeros, label=torch.tensor([1.0, 0.0], device="cpu"),
                        kl_logp=zeros, kl_ref_logp=zeros, kl_mask=torch.ones(2, 1, device="cpu"))
    call_with(spec.fn, inp, options=options, context=dict(beta=beta, num_rows=1.0, num_tokens=1.0))


def collate(prompts: list[list[int]], completions: list[list[int]], keys: list[str], pad_id: int, device: torch.device,
            masks: Optional[list[Optional[list[int]]]] = None) -> RolloutBatch:
    """A RolloutBatch of given (prompt, completion) token lists: prompts left-padded, completions right-padded.

    Rows with equal ``keys`` (the same prompt) share a group id, so their prompt is encoded once.
    ``masks``: per row None (every completion token is trained) or its 0/1 loss mask; any given
    makes the batch's ``action_mask`` (the trained tokens; ``completion_mask`` still attends to all).
    """
    b, p, t = len(prompts), max(map(len, prompts)), max(1, max(map(len, completions)))
    prompt_ids = torch.full((b, p), pad_id, dtype=torch.long, device="cpu")
    prompt_mask = torch.zeros((b, p), dtype=torch.long, device="cpu")
    completion_ids = torch.full((b, t), pad_id, dtype=torch.long, device="cpu")
    completion_mask = torch.zeros((b, t), dtype=torch.long, device="cpu")
    for i, (q, c) in enumerate(zip(prompts, completions)):
        prompt_ids[i, p - len(q):], prompt_mask[i, p - len(q):] = torch.tensor(q, device="cpu"), 1
        completion_ids[i, : len(c)], completion_mask[i, : len(c)] = torch.tensor(c, dtype=torch.long, device="cpu"), 1
    action_mask = None
    if masks is not None and any(m is not None for m in masks):
        action_mask = completion_mask.clone()
        for i, m in enumerate(masks):
            if m is not None:
                action_mask[i, : len(m)] = torch.tensor(m, dtype=torch.long, device="cpu")
    groups: dict[str, int] = {}
    group_ids = torch.tensor([groups.setdefault(k, len(groups)) for k in keys], device="cpu")
    on = lambda x: x.to(device)  # noqa: E731 -- built on the host, moved once
    return RolloutBatch(
        prompt_ids=on(prompt_ids), prompt_mask=on(prompt_mask), completion_ids=on(completion_ids), completion_mask=on(completion_mask),
        group_ids=on(group_ids), sampling_logp=torch.zeros((b, t), device=device), truncated=torch.zeros(b, dtype=torch.bool, device=device),
        action_mask=on(action_mask) if action_mask is not None else None,
    )


class OfflineTrainer:
    """Wires an offline stage: data, policy (and reference), optimizer, the registered objective."""

    def __init__(self, cfg: Config, model: Optional[torch.nn.Module] = None, tokenizer: Any = None) -> None:
        self.spec = offline_spec(cfg)  # every mistake of the run's settings, before anything loads
        tune_malloc(device=setup.check_device(cfg))
        self.cfg = cfg
        if cfg.model.threads:
            torch.set_num_threads(cfg.model.threads)
        setup.seed_everything(cfg.train.seed)
        self.run_dir = Path(cfg.logging.output_dir)
        self.splits = load_offline_splits(cfg.data, cfg.stage, cfg.environment)  # a row lacking the stage's columns: one line
        self.family = run_family(cfg, model, tokenizer)  # offline stages need a family with build_offline_policy
        if model is None:
            model, tokenizer = setup.load_policy(cfg)
        elif cfg.model.lora.enabled and not hasattr(model, "peft_config"):
            from grpokit.model.lora import apply_lora

            model = apply_lora(model, cfg.model.lora)
        self.model, self.tokenizer = setup.place_policy(model, cfg), tokenizer
        self.needs_ref = "ref_logp" in self.spec.inputs
        self.sync_every = sync_period(cfg, self.spec)
        self.policy = self._build_policy()
        off = cfg.offline
        kw = dict(system_prompt=cfg.data.system_prompt, eos_id=self.policy.backend.eos_ids[0],
                  max_prompt_tokens=off.max_prompt_tokens, max_completion_tokens=off.max_completion_tokens)
        self.train_examples = encode(tokenizer, self.splits.train, cfg.stage, **kw)
        self.heldout_examples = encode(tokenizer, self.splits.heldout, cfg.stage, **kw)
        self.optimizer = setup.build_optimizer(self.model, cfg.optim)
        self.scheduler = setup.build_scheduler(self.optimizer, cfg.optim, cfg.train.steps)
        self.sampler = PromptSampler(self.train_examples, cfg.data.seed if cfg.data.order_seed is None else cfg.data.order_seed)
        self.logger = RunLogger.for_run(self.run_dir, cfg)
        self.step, self.elapsed = 0, 0.0

    def _build_policy(self):
        cfg = self.cfg
        return self.family.build_offline_policy(cfg, self.model, self.tokenizer, reference=setup.reference_model(self.model, cfg, self.needs_ref),
                                                needs_ref=self.needs_ref)

    # ------------------------------------------------------------------ batches
    def _sequences(self, examples: list[Example]) -> tuple[list, list, list, list]:
        """(prompts, completions, keys, loss masks) of ``examples``' rows; DPO: all chosen rows, then all rejected rows."""
        if self.cfg.stage == "dpo":
            return ([e.prompt_ids for e in examples] * 2, [e.completions[0] for e in examples] + [e.completions[1] for e in examples],
                    [e.key for e in examples] * 2, [e.mask(0) for e in examples] + [e.mask(1) for e in examples])
        return [e.prompt_ids for e in examples], [e.completions[0] for e in examples], [e.key for e in examples], [e.mask(0) for e in examples]

    def _batch(self, examples: list[Example]) -> RolloutBatch:
        prompts, completions, keys, masks = self._sequences(examples)
        return collate(prompts, completions, keys, self.policy.pad_id, self.policy.device, masks)

    def _chunks(self, examples: list[Example]) -> list[list[Example]]:
        per = max(1, self.cfg.train.micro_batch_size // (2 if self.cfg.stage == "dpo" else 1))
        return [examples[s : s + per] for s in range(0, len(examples), per)]

    def _reference_point_inputs(self, examples: list[Example]) -> dict[str, torch.Tensor]:
        """``kl_logp``, ``kl_ref_logp``, ``kl_mask`` ``[n, T']``: the mismatched pairs (x_i, y_(i-1 mod n)), scored without gradient."""
        n = len(examples)
        prompts = [e.prompt_ids for e in examples]
        completions = [examples[(i - 1) % n].completions[0] for i in range(n)]  # TRL: completions shifted by one
        masks = [examples[(i - 1) % n].mask(0) for i in range(n)]
        keys = [e.key for e in examples]
        width = max(1, max(map(len, completions)))
        device = self.policy.device
        out = {k: torch.zeros((n, width), device=device) for k in ("kl_logp", "kl_ref_logp", "kl_mask")}
        for s in range(0, n, self.cfg.train.micro_batch_size):
            rows = slice(s, s + self.cfg.train.micro_batch_size)
            mb = collate(prompts[rows], completions[rows], keys[rows], self.policy.pad_id, device, masks[rows])
            t = mb.completion_ids.shape[1]
            out["kl_logp"][rows, :t] = self.policy.score(mb, "current")
            out["kl_ref_logp"][rows, :t] = self.policy.score(mb, "reference")
            out["kl_mask"][rows, :t] = mb.unit_mask.to(torch.float32)
        return out

    def objective(self, examples: list[Example], learn: bool) -> dict[str, float]:
        """The step's loss and metrics over ``examples``; ``learn``: back-propagate it (gradients accumulate in ``.grad``)."""
        inputs = self.spec.inputs
        kl = self._reference_point_inputs(examples) if "kl_logp" in inputs else {}
        num_tokens = float(sum(len(c) if e.mask(k) is None else sum(e.mask(k)) for e in examples for k, c in enumerate(e.completions)))
        context = dict(beta=self.cfg.offline.beta, num_rows=float(len(examples)), num_tokens=max(num_tokens, 1.0))
        totals: dict[str, float] = {"loss": 0.0}
        for chunk in self._chunks(examples):
            mb = self._batch(chunk)
            ref = self.policy.score(mb, "reference") if "ref_logp" in inputs else None
            label = torch.tensor([float(e.label) for e in chunk], device=mb.device) if "label" in inputs else None
            with in_place_embedding_grads(self.policy.module) if learn else torch.no_grad():
                fwd = self.policy.learn_forward(mb, with_entropy=False, entropy_grad=False) if learn else None
                logp = fwd.logp if learn else self.policy.score(mb, "current")
                inp = OfflineInputs(logp=logp, mask=mb.unit_mask.to(torch.float32), ref_logp=ref, label=label, **kl)
                loss, metrics = call_with(self.spec.fn, inp, options=self.cfg.offline.loss_options, context=context)
                if learn:
                    fwd.backward(loss)
            totals["loss"] += float(loss.detach())
            for key, value in metrics.items():  # micro-batch means, weighted by its share of the rows
                totals[key] = totals.get(key, 0.0) + float(value) * len(chunk) / len(examples)
        return {**totals, "tokens": num_tokens}

    # ------------------------------------------------------------------ one step
    def train_step(self) -> dict[str, float]:
        """One optimizer step on the next batch of examples; returns its metrics."""
        t0 = time.perf_counter()
        examples = self.sampler.next_batch(self.cfg.offline.batch_size)
        self.model.train()
        params = list(self.policy.trainable_parameters())
        allocate_gradients(params)
        metrics = self.objective(examples, learn=True)
        if self.sync_every and (self.step + 1) % self.sync_every == 0:
            self.policy.sync_reference()  # the pre-update weights: the reference lags the policy by one update (HALOs)
        clip = self.cfg.optim.max_grad_norm
        metrics["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(params, clip if clip > 0 else float("inf")))
        metrics["lr"] = self.scheduler.get_last_lr()[0]
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        metrics["time/step_s"] = time.perf_counter() - t0
        return metrics

    # ------------------------------------------------------------------ eval, checkpoints
    def evaluate(self, label: str) -> dict[str, dict[str, float]]:
        """Offline metrics (loss, implicit-reward margins) on the training and held-out rows; greedy accuracy when held-out rows have answers."""
        self.model.eval()
        results: dict[str, dict[str, float]] = {}
        for split, examples in (("train", self.train_examples), ("heldout", self.heldout_examples)):
            if not examples:
                continue
            if "kl_logp" in self.spec.inputs and len(examples) < 2:
                continue  # no mismatched pair to estimate KTO's reference point from
            result = {**self.objective(examples[:EVAL_ROWS], learn=False), "n": float(min(len(examples), EVAL_ROWS))}
            if split == "heldout":
                result.update(self._accuracy())
            results[split] = result
            self._log_eval(label, split, result)
        return results

    def _accuracy(self) -> dict[str, float]:
        rows = self.splits.heldout
        if not rows or any(row.get("answer") is None for row in rows):
            return {}
        from grpokit.trainer.evaluation import evaluate_accuracy

        rewards = setup.build_rewards(self.cfg.rewards)
        e = self.cfg.eval
        texts = setup.render_all(self.tokenizer, rows, self.cfg.data.system_prompt)
        result = evaluate_accuracy(self.policy.backend, rows, texts, setup.accuracy_judge(self.cfg, rewards), batch_size=e.batch_size, max_new_tokens=e.max_new_tokens)
        return {"accuracy": result["accuracy"]}

    def _log_eval(self, label: str, split: str, result: dict[str, float]) -> None:
        """Held-out results go through the run logger (and its trackers); training-row results only to ``eval.jsonl``, in its format."""
        if split == "heldout":
            self.logger.log_eval(self.step, label, result)
            return
        with open(self.run_dir / "eval.jsonl", "a") as f:
            f.write(json.dumps({"step": self.step, "label": label, "split": split, **result}) + "\n")

    def save(self) -> Path:
        syncing = self.sync_every and self.policy.reference is not None
        return ckpt_io.save_checkpoint(
            self.run_dir / "checkpoints", self.step, model=self.model, tokenizer=self.tokenizer, optimizer=self.optimizer,
            scheduler=self.scheduler, state={"sampler": self.sampler.state(), "elapsed_s": self.elapsed, "stage": self.cfg.stage},
            extra={"reference": self.policy.reference.state_dict()} if syncing else None,  # a synced reference is not the initial model
            keep=self.cfg.logging.keep_checkpoints, merged=self.cfg.model.lora.save_merged,
        )

    def resume(self) -> None:
        """Continue from the newest complete checkpoint of ``output_dir`` (none is a one-line error)."""
        ckpt = ckpt_io.require_checkpoint(self.run_dir / "checkpoints")
        ckpt_io.load_model_weights(self.model, ckpt)
        state = ckpt_io.load_training_state(ckpt, self.optimizer, self.scheduler)
        self.sampler.load_state(state["sampler"])
        if self.sync_every and self.policy.reference is not None:
            self.policy.reference.load_state_dict(torch.load(ckpt / "extra.pt", weights_only=False)["reference"])
        self.step, self.elapsed = state["step"], state.get("elapsed_s", 0.0)
        self.logger.truncate_after(self.step)
        log.info("resumed from %s (step %d)", ckpt, self.step)

    # ------------------------------------------------------------------ the run
    def train(self, resume: bool = False) -> dict[str, Any]:
        """Evaluate, train ``train.steps`` steps (checkpoints, mid-run evaluations), evaluate, write the report."""
        cfg = self.cfg
        if resume:
            self.resume()
        elif (self.run_dir / "metrics.jsonl").exists() or (self.run_dir / "eval.jsonl").exists():
            log.warning("%s holds an earlier run's logs: replacing them (use --resume to continue that run)", self.run_dir)
            self.logger.truncate_after(-1)
        (self.run_dir / "config.yaml").write_text(dump_yaml(cfg))
        before = self.evaluate("before") if cfg.eval.before and not resume else {}
        budget_s = cfg.train.max_minutes * 60 if cfg.train.max_minutes else float("inf")
        with StepProgress(cfg.train.steps, enabled=cfg.logging.progress, start=self.step, budget_s=budget_s, elapsed_s=self.elapsed) as progress:
            while self.step < cfg.train.steps and self.elapsed < budget_s:
                t0, start = time.perf_counter(), self.sampler.state()
                try:
                    metrics = self.train_step()
                except KeyboardInterrupt:
                    if self.step > 0:
                        self.sampler.load_state(start)  # the unfinished step is redone on --resume
                        log.warning("interrupted: saving step %d to resume from (grpokit train ... --resume)", self.step)
                        self.save()
                    raise
                metrics["time/elapsed_s"] = self.elapsed + time.perf_counter() - t0
                self.logger.log_metrics(self.step, metrics)
                progress.update(self.step, metrics)
                if cfg.eval.every and self.step % cfg.eval.every == 0 and self.step < cfg.train.steps:
                    self.evaluate("during")
                if cfg.logging.checkpoint_every and self.step % cfg.logging.checkpoint_every == 0:
                    self.save()
                self.elapsed += time.perf_counter() - t0
        if not cfg.logging.checkpoint_every or self.step % cfg.logging.checkpoint_every:
            self.save()
        after = self.evaluate("after") if cfg.eval.after else {}
        self.logger.close()
        from grpokit.trainer.report import write_report

        report = write_report(self.run_dir)
        return {"stage": cfg.stage, "before": before, "after": after, "train_minutes": self.elapsed / 60, "steps": self.step, "report": str(report)}
