"""Demonstration writers: SFT completions written from a built-in task's rows (``data.demonstrations``).

``stage: sft`` on a built-in task without ``data.path`` trains on completions the task's rows
imply. A demonstration writer is a registered function ``row -> completion text`` (raising
ValueError, with the reason, for a row it cannot write); :func:`demonstration_splits` applies it
to both splits and keeps every other column (``answer``, ``db_path``, ...) so the SFT stage's
held-out accuracy is scored by the run's rewards, as in GRPO. Without a writer the task's expert
turns are replayed in its environment (:mod:`grpokit.envs.imitation`).

Registered here: ``sql_cot`` (clause-level chain of thought from the gold SQL,
:mod:`grpokit.data.sql_cot`; Stoisser et al., arXiv 2505.00016, stage 1).
"""

from __future__ import annotations

from grpokit.registry import Registry

DEMONSTRATIONS = Registry("demonstration")


def demonstration_splits(cfg, splits):
    """``splits`` with a ``completion`` column written by ``DEMONSTRATIONS[cfg.demonstrations]``.

    ``cfg`` is the run's ``DataConfig``; ``splits`` the task's ``TaskSplits``. A row the writer
    refuses is a ValueError naming the field, the task, the split and row, and the reason.
    """
    from grpokit.data.tasks import TaskSplits

    write = DEMONSTRATIONS.get(cfg.demonstrations)
    out = {}
    for split in ("train", "heldout"):
        rows = []
        for i, row in enumerate(getattr(splits, split)):
            try:
                rows.append({**row, "completion": write(row)})
            except ValueError as exc:
                raise ValueError(f"data.demonstrations '{cfg.demonstrations}' cannot write a completion for "
                                 f"data.task '{cfg.task}' ({split} row {i}): {exc}") from None
        out[split] = rows
    return TaskSplits(**out)
