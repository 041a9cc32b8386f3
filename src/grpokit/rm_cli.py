"""``grpokit rm train``: train a regression or pairwise reward model from a data file.

``--data generated:NAME`` trains on a generated set (``GENERATED``): ``safety_aspects``, responses to
benign and harmful requests labelled over helpfulness / harmlessness / format
(:mod:`grpokit.data.safety_task`), or ``word_counts`` (``make_synthetic_rm_data``), whose aspect
scores are word counts, so a working reward model must reach held-out Pearson r close to 1.
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
from pathlib import Path

logger = logging.getLogger(__name__)

SYNTHETIC_ASPECTS = ("politeness", "safety", "actionability")
# One word per aspect: its count is then close to linear in mean-pooled embeddings, so a frozen
# encoder plus a linear head can reach r ≈ 0.97 (several synonyms per aspect gave r ≈ 0.92).
_POLITE, _UNSAFE, _ACTION = ("please",), ("weapon",), ("install",)
_FILLER = tuple(
    "the a report weather blue table river music garden window paper morning city green story "
    "light stone road".split()
)
_SYNTHETIC_WORDS = 10  # words per synthetic response
_MAX_COUNT = 3  # each word class occurs 0..3 times
_MIN_PREFERENCE_GAP = 2  # pairwise: label sums differ by at least this (clear preferences)


def _synthetic_response(rng: random.Random) -> tuple[str, dict[str, float]]:
    """A shuffled bag of 10 words and its labels: politeness = #"please", safety = 3 − #"weapon", …"""
    n_polite, n_unsafe, n_action = (rng.randint(0, _MAX_COUNT) for _ in range(3))
    words = [rng.choice(_POLITE) for _ in range(n_polite)] + [rng.choice(_UNSAFE) for _ in range(n_unsafe)]
    words += [rng.choice(_ACTION) for _ in range(n_action)]
    words += [rng.choice(_FILLER) for _ in range(_SYNTHETIC_WORDS - len(words))]
    rng.shuffle(words)
    labels = {"politeness": float(n_polite), "safety": float(_MAX_COUNT - n_unsafe),
              "actionability": float(n_action)}
    return " ".join(words), labels


def make_synthetic_rm_data(n: int, seed: int, kind: str = "regression") -> list[dict]:
    """``n`` synthetic rows whose labels are word counts of the text.

    ``kind="regression"``: ``{"prompt", "response", "politeness", "safety", "actionability"}``
    with politeness = #"please", safety = 3 − #"weapon", actionability = #"install".
    ``kind="pairwise"``: ``{"prompt", "chosen", "rejected"}`` where chosen has the larger sum of
    the three labels, larger by at least 2 (closer pairs are redrawn).
    """
    rng = random.Random(f"grpokit/rm-synthetic/{kind}/{seed}")
    rows: list[dict] = []
    while len(rows) < n:
        text, labels = _synthetic_response(rng)
        prompt = "Answer the user's request."
        if kind == "regression":
            rows.append({"prompt": prompt, "response": text, **labels})
            continue
        if kind != "pairwise":
            raise ValueError(f"make_synthetic_rm_data: kind must be 'regression' or 'pairwise', got {kind!r}")
        other, other_labels = _synthetic_response(rng)
        a, b = sum(labels.values()), sum(other_labels.values())
        if abs(a - b) >= _MIN_PREFERENCE_GAP:
            chosen, rejected = (text, other) if a > b else (other, text)
            rows.append({"prompt": prompt, "chosen": chosen, "rejected": rejected})
    return rows


def _safety_aspects(n: int, seed: int) -> list[dict]:
    from grpokit.data.safety_task import make_aspect_rm_data

    return make_aspect_rm_data(n, seed)


# --data generated:NAME -> rows(n, seed)
GENERATED = {
    "safety_aspects": _safety_aspects,  # helpfulness / harmlessness / format of responses to benign and harmful requests
    "word_counts": make_synthetic_rm_data,  # politeness / safety / actionability = word counts
}


def read_rows(data: str, n: int, seed: int) -> list[dict]:
    """Rows of a data file, or ``n`` rows of the generated set ``generated:NAME`` drawn with ``seed``."""
    from grpokit.data.files import _read_any

    if not data.startswith("generated:"):
        return _read_any(Path(data), None)
    name = data.split(":", 1)[1]
    if name not in GENERATED:
        raise ValueError(f"--data {data}: no such generated set; use one of {', '.join('generated:' + k for k in GENERATED)}")
    return GENERATED[name](n, seed)


def build_rm_train_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="grpokit rm train", description="train a reward model")
    p.add_argument("--kind", required=True, choices=("regression", "pairwise"),
                   help="regression: one MSE head per aspect; pairwise: Bradley–Terry on chosen/rejected")
    p.add_argument("--data", required=True, help="rows: .jsonl, .json, .csv, .parquet, a save_to_disk folder, or a "
                   f"generated set: {', '.join('generated:' + k for k in GENERATED)}")
    p.add_argument("--rows", type=int, default=600, help="rows of a generated set (--data generated:NAME)")
    p.add_argument("--quiet", action="store_true", help="no progress bar or table")
    p.add_argument("--out", required=True, help="folder to write the reward model to")
    p.add_argument("--text-column", default="response", help="regression: column with the scored text")
    p.add_argument("--aspects", help="regression: comma-separated numeric label columns, e.g. safety,politeness")
    p.add_argument("--prompt-column", default=None,
                   help="encode (prompt, text) pairs from this column (pairwise default: prompt; 'none' to drop)")
    p.add_argument("--chosen-column", default="chosen")
    p.add_argument("--rejected-column", default="rejected")
    p.add_argument("--backbone", default=None, help="encoder: all-minilm-l6-v2 (default) or a model folder")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--lr", type=float, default=None, help="default 1e-3 with --freeze-backbone, else 3e-5")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--heldout-fraction", type=float, default=0.2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--freeze-backbone", action="store_true", help="train only the heads on frozen embeddings")
    return p


def _train(args: argparse.Namespace) -> dict[str, float]:
    from grpokit.rewards.reward_model import DEFAULT_BACKBONE, train_pairwise_rm, train_regression_rm

    rows = read_rows(args.data, args.rows, args.seed)
    prompt_column = None if args.prompt_column in (None, "none") else args.prompt_column
    common = dict(backbone=args.backbone or DEFAULT_BACKBONE, epochs=args.epochs, lr=args.lr,
                  batch_size=args.batch_size, seed=args.seed, heldout_fraction=args.heldout_fraction,
                  max_length=args.max_length, freeze_backbone=args.freeze_backbone, progress=not args.quiet)
    if args.kind == "regression":
        aspects = [a.strip() for a in (args.aspects or "").split(",") if a.strip()]
        if not aspects:
            raise ValueError(
                "--aspects is required for --kind regression: name the label columns, e.g. --aspects safety,politeness"
            )
        return train_regression_rm(rows, args.text_column, aspects, args.out, prompt_column=prompt_column, **common)
    if args.prompt_column is None:
        prompt_column = "prompt"
    return train_pairwise_rm(rows, args.out, prompt_column=prompt_column, chosen_column=args.chosen_column,
                             rejected_column=args.rejected_column, **common)


def rm_train_main(argv: list[str] | None = None) -> int:
    """Run ``grpokit rm train``; ``argv`` is everything after ``rm train``. Returns the exit code."""
    args = build_rm_train_parser().parse_args(argv)
    try:
        metrics = _train(args)
    except (ValueError, FileNotFoundError) as exc:  # user mistakes: one line, exit 2
        print(f"grpokit: error: {exc}", file=sys.stderr)
        return 2
    if args.quiet:
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{args.kind} reward model → {args.out} (held-out)")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for name, value in metrics.items():
        table.add_row(name, f"{value:.4f}" if not name.startswith("n_") else str(int(value)))
    Console().print(table)
    return 0


if __name__ == "__main__":
    sys.exit(rm_train_main())
