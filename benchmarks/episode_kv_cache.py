#!/usr/bin/env python
"""Multi-turn episode sampling with the KV cache kept across turns against a full prefill every turn.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/episode_kv_cache.py [--turns 2 4 8] [--prompts 8] [--group 4]
    .venv/bin/python benchmarks/episode_kv_cache.py --dry-run     # tiny random model, seconds

Both sides sample the same work with :class:`grpokit.envs.episodes.EpisodeBackend` on
SmolLM2-135M-Instruct: ``--prompts`` x ``--group`` episodes of exactly ``--turns`` turns (a
fixed-length environment answering each turn with a ~30-token observation), every turn exactly
``--tokens`` sampled tokens (``min_new_tokens`` = ``max_new_tokens``). ``environment.kv_cache``
on: each turn prefills only what an episode gained since its last turn; off: each turn prefills the
episode's whole context again. Model loading and one warm-up episode batch per side are excluded.
Each ``--turns`` value (default 2, 4 and 8) is one row of a table: sampled tokens per second with
the cache off and on, their ratio and the prefilled tokens' ratio. The last line is
machine-readable, for the largest ``--turns``: ``speedup=<seconds off / seconds on>``
``prefill_ratio=<prefilled tokens off / on>``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

OBSERVATION = "You face north. You see a red box (2 ahead, 1 left); a blue door (3 ahead, 2 right); a green lamp (1 behind)."


class FixedTurns:
    """An environment that answers every turn with the same observation and ends after ``turns`` turns."""

    def __init__(self, turns: int = 12) -> None:
        self.turns = turns

    def reset(self, row, seed=None) -> str:
        self.t = 0
        return ""

    def step(self, action: str):
        from grpokit.envs.base import StepResult

        self.t += 1
        return StepResult(OBSERVATION, 0.0, terminated=self.t >= self.turns)


def sample(model, tok, kv_cache: bool, a, prefilled: list[int]) -> float:
    """Seconds to sample one batch of episodes (after one warm-up batch)."""
    import torch

    from grpokit.envs.episodes import EpisodeBackend
    from grpokit.rollout.hf import HFBackend
    from grpokit.rollout.types import SamplingParams

    from grpokit.config.schema import EnvironmentConfig

    env = EnvironmentConfig(name=f"{Path(__file__).resolve()}:FixedTurns", options={"turns": a.turns}, max_turns=a.turns,
                            max_episode_tokens=100_000, step_timeout_s=0.0, on_error="raise", observation_role="user",
                            kv_cache=kv_cache)
    rows = [{"prompt": f"Walk to object {i}. Reply with up to 3 actions: forward, turn left, turn right, stop."} for i in range(a.prompts)]
    texts = [tok.apply_chat_template([{"role": "user", "content": r["prompt"]}], tokenize=False, add_generation_prompt=True) for r in rows]
    params = SamplingParams(max_new_tokens=a.tokens, min_new_tokens=a.tokens, temperature=1.0)
    backend = EpisodeBackend(HFBackend(model, tok), env, None, seed=0)
    torch.manual_seed(0)
    backend.generate(texts, rows, a.group, params)  # warm-up
    prefilled.clear()
    t0 = time.perf_counter()
    batch = backend.generate(texts, rows, a.group, params)
    seconds = time.perf_counter() - t0
    assert all(ep["turns"] == a.turns for ep in batch.episodes)
    return seconds


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--turns", type=int, nargs="+", default=[2, 4, 8], help="episode lengths, one table row each")
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--group", type=int, default=4)
    p.add_argument("--tokens", type=int, default=16, help="sampled tokens per turn (fixed)")
    p.add_argument("--out", default=None, help="unused (the dry-run harness passes it)")
    p.add_argument("--dry-run", action="store_true", help="tiny random model, 3 turns")
    a = p.parse_args(argv)
    if a.dry_run:
        from grpokit.testing import tiny_model_and_tokenizer

        model, tok = tiny_model_and_tokenizer(seed=0)
        a.turns, a.prompts, a.group, a.tokens = [2, 3], 2, 2, 4
    else:
        from grpokit.model.loading import load_model

        model, tok = load_model("smollm2-135m-instruct")
    prefilled: list[int] = []  # real tokens of every multi-token forward (the prefills)
    model.register_forward_hook(
        lambda m, args, kw, out: prefilled.append(int(kw["attention_mask"][:, -kw["input_ids"].shape[1]:].sum()))
        if kw.get("input_ids") is not None and kw["input_ids"].shape[1] > 1 else None, with_kwargs=True)
    print("| turns | cache off: sampled tok/s | cache on: sampled tok/s | speedup | prefilled tokens off / on |")
    print("|---|---|---|---|---|")
    for turns in a.turns:
        seconds, tokens = {}, {}
        for kv_cache in (False, True):
            seconds[kv_cache] = sample(model, tok, kv_cache, argparse.Namespace(**{**vars(a), "turns": turns}), prefilled)
            tokens[kv_cache] = sum(prefilled)
        sampled = a.prompts * a.group * turns * a.tokens  # every turn samples exactly a.tokens tokens
        print(f"| {turns} | {sampled / seconds[False]:.1f} | {sampled / seconds[True]:.1f} | "
              f"{seconds[False] / seconds[True]:.2f} | {tokens[False]} / {tokens[True]} |", flush=True)
    print(f"speedup={seconds[False] / seconds[True]:.2f} prefill_ratio={tokens[False] / max(tokens[True], 1):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
