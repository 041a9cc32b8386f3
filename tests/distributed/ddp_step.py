"""One learner step of the tiny model, run as 1 process or under torchrun (see test_ddp.py).

Usage: ``python ddp_step.py MODEL_DIR OUT_DIR``. Rank 0 writes ``OUT_DIR/step.pt``: the
gradients right before ``optimizer.step`` (after the all-reduce; clipping is off), the step's
metrics and the batch's completion ids. Every rank writes ``OUT_DIR/rows-<rank>.json``: the
row ranges of the micro-batches it learned.
"""

import json
import os
import sys
from pathlib import Path

import torch

from grpokit.config import load_config
from grpokit.trainer.loop import Trainer

model_dir, out = sys.argv[1], Path(sys.argv[2])
cfg = load_config(overrides=[
    f"model.name={model_dir}", f"logging.output_dir={out / 'run'}", "logging.progress=false",
    "logging.log_samples_every=0", "data.n_train=20", "data.n_heldout=4", "rollout.group_size=4",
    "rollout.prompts_per_step=2", "rollout.max_new_tokens=6", "train.micro_batch_size=2",
    "optim.max_grad_norm=0", "eval.before=false", "eval.after=false",
    'rewards=[{name: format_regex, kwargs: {pattern: "[a-m]"}}]',  # varies within groups: advantages != 0
])
trainer = Trainer(cfg)
rank = int(os.environ.get("RANK", "0"))
grads: dict[str, torch.Tensor] = {}
rows: list[list[int]] = []
step, parts = trainer.optimizer.step, trainer.learners.parts


def capture_step(*args, **kwargs):
    grads.update({n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None})
    return step(*args, **kwargs)


def capture_parts(batch, size, keep=None):
    result = parts(batch, size, keep)
    rows.extend(sorted(r.tolist()) for r, _ in result)
    capture_parts.batch = batch
    return result


trainer.optimizer.step, trainer.learners.parts = capture_step, capture_parts
metrics = trainer.train_step()
(out / f"rows-{rank}.json").write_text(json.dumps(rows))
if rank == 0:
    torch.save({"grads": grads, "metrics": metrics, "completion_ids": capture_parts.batch.completion_ids}, out / "step.pt")
