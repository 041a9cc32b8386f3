"""The data passed from rollout to rewards and the learner."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Optional, Protocol

import torch


@dataclass
class RolloutBatch:
    """G sampled completions for each of several prompts, flattened to B = prompts x G rows.

    prompt_ids:      [B, P] left-padded prompt tokens (P = 0 for a family whose condition is not text,
                     e.g. the flow family's class labels, kept in its own batch field)
    prompt_mask:     [B, P] 1 = real prompt token
    completion_ids:  [B, T] right-padded completion tokens (EOS included when produced); a family whose
                     units are not tokens puts each unit's own id here (the flow family: its denoising step)
    completion_mask: [B, T] 1 = generated token that counts (up to and including EOS)
    group_ids:       [B] index of the prompt each row came from (0..prompts-1)
    sampling_logp:   [B, T] log-prob of each token under the sampling distribution
    truncated:       [B] True when the completion hit max_new_tokens without EOS
    entropy:         [B, T] entropy of the tempered sampling distribution at each position (0 on pad)
    prompts / completions: decoded texts per row; rows: the data row (answer, columns) per row
    weights_version: the learner step whose weights sampled the batch (-1 = the current weights)
    engine:          what sampled it: 'hf' (the learner's own model in-process) or an inference
                     engine ('vllm'), whose numerics differ from the learner's even at equal weights
    action_mask:     [B, T] or None. Multi-turn trajectories (``grpokit.envs``): 1 on the tokens the
                     policy sampled, 0 on the environment's observation and chat-template tokens,
                     which ``completion_mask`` (the attention mask) still counts
    episodes:        per row, what an environment episode reported (turns, return, messages), or []

    The learnable units of a text policy are its sampled completion tokens: ``unit_mask`` is
    ``action_mask`` when set, else ``completion_mask``; ``behaviour_logp`` is ``sampling_logp``
    (the log-probs of the distribution that actually drew each unit, which off-policy
    corrections compare against; 0 on observation tokens).
    """

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor
    group_ids: torch.Tensor
    sampling_logp: torch.Tensor
    truncated: torch.Tensor
    entropy: Optional[torch.Tensor] = None
    prompts: list[str] = field(default_factory=list)
    completions: list[str] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    weights_version: int = -1
    engine: str = "hf"
    action_mask: Optional[torch.Tensor] = None
    episodes: list[dict[str, Any]] = field(default_factory=list)

    @property
    def unit_mask(self) -> torch.Tensor:
        """``[B, U]`` 1 = a learnable unit (here: a token the policy generated)."""
        return self.action_mask if self.action_mask is not None else self.completion_mask

    @property
    def behaviour_logp(self) -> torch.Tensor:
        """``[B, U]`` log-probs of each unit under the distribution that sampled it."""
        return self.sampling_logp

    @property
    def device(self) -> torch.device:
        return self.completion_ids.device

    def __len__(self) -> int:
        return self.completion_ids.shape[0]

    def select(self, index: torch.Tensor | slice) -> "RolloutBatch":
        """Rows ``index`` of the batch (e.g. a micro-batch or the kept groups), same widths."""
        idx = range(len(self))[index] if isinstance(index, slice) else index.tolist()
        sub = RolloutBatch(
            prompt_ids=self.prompt_ids[index],
            prompt_mask=self.prompt_mask[index],
            completion_ids=self.completion_ids[index],
            completion_mask=self.completion_mask[index],
            group_ids=self.group_ids[index],
            sampling_logp=self.sampling_logp[index],
            truncated=self.truncated[index],
            entropy=self.entropy[index] if self.entropy is not None else None,
            prompts=[self.prompts[i] for i in idx],
            completions=[self.completions[i] for i in idx],
            rows=[self.rows[i] for i in idx],
            weights_version=self.weights_version,
            engine=self.engine,
            action_mask=self.action_mask[index] if self.action_mask is not None else None,
            episodes=[self.episodes[i] for i in idx] if self.episodes else [],
        )
        return sub

    def columns(self) -> dict[str, list]:
        """Per-row data columns (everything but the prompt) as lists, for reward functions.

        Plus ``completion_ids``: each row's completion tokens without padding, as TRL passes them
        to reward functions (it replaces a data column of that name); for an environment episode,
        every token after the prompt (observations included). An episode's own report
        (``grpokit.envs.episode_columns``: ``env_return``, ``messages``, ``turns``, …) adds one
        column per key, replacing a data column of the same name.
        """
        keys = {k for row in self.rows for k in row if k != "prompt"}
        cols = {k: [row.get(k) for row in self.rows] for k in sorted(keys)}
        ids, keep = self.completion_ids.cpu(), self.completion_mask.cpu().bool()  # one copy off an accelerator
        cols["completion_ids"] = [row[m].tolist() for row, m in zip(ids, keep)]
        for key in sorted({k for ep in self.episodes for k in ep}):
            cols[key] = [ep.get(key) for ep in self.episodes]
        return cols


@dataclass
class SamplingParams:
    """How completions are drawn."""

    max_new_tokens: int = 32
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    greedy: bool = False
    min_new_tokens: int = 0  # EOS is masked out of the sampling distribution before this many tokens


def group_batch(
    tokenizer: Any,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    rows: list[dict[str, Any]],
    group_size: int,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    sampling_logp: torch.Tensor,
    truncated: torch.Tensor,
    entropy: Optional[torch.Tensor] = None,
) -> RolloutBatch:
    """A prompt-major RolloutBatch from per-prompt ``[n, P]`` prompts and per-row ``[n*G, T]`` completions.

    Every backend ends here: prompts repeated G times, group ids, decoded completion texts (the
    masked tokens, special tokens skipped) and each row's data row.
    """
    group_ids = torch.arange(prompt_ids.shape[0], device=prompt_ids.device).repeat_interleave(group_size)
    ids_cpu, mask_cpu = completion_ids.cpu(), completion_mask.cpu()  # one copy off an accelerator, not one per row
    texts = tokenizer.batch_decode([ids[m.bool()] for ids, m in zip(ids_cpu, mask_cpu)], skip_special_tokens=True)
    group_list = group_ids.tolist()
    return RolloutBatch(
        prompt_ids=prompt_ids.repeat_interleave(group_size, 0),
        prompt_mask=prompt_mask.repeat_interleave(group_size, 0),
        completion_ids=completion_ids,
        completion_mask=completion_mask,
        group_ids=group_ids,
        sampling_logp=sampling_logp,
        truncated=truncated,
        entropy=entropy,
        prompts=[rows[g]["prompt"] for g in group_list],
        completions=texts,
        rows=[rows[g] for g in group_list],
    )


class GenerationBackend(Protocol):
    """Anything that samples G completions per prompt and returns a RolloutBatch."""

    def generate(
        self, prompt_texts: list[str], rows: list[dict], group_size: int, params: SamplingParams
    ) -> RolloutBatch: ...


def _pad_to(x: torch.Tensor, width: int, value: float, left: bool) -> torch.Tensor:
    pad = width - x.shape[1]
    if pad == 0:
        return x
    filler = x.new_full((x.shape[0], pad), value)
    return torch.cat([filler, x] if left else [x, filler], dim=1)


def concat_batches(batches: list[RolloutBatch], pad_id: int) -> RolloutBatch:
    """Stack rollout batches (e.g. several dynamic-sampling rounds); group ids stay distinct.

    Prompts are re-padded on the left and completions on the right to the widest batch.
    """
    if len(batches) == 1:
        return batches[0]
    p = max(b.prompt_ids.shape[1] for b in batches)
    t = max(b.completion_ids.shape[1] for b in batches)
    offsets, total = [], 0
    for b in batches:
        offsets.append(total)
        total += int(b.group_ids.max()) + 1 if len(b) else 0
    has_entropy = all(b.entropy is not None for b in batches)
    multi_turn = any(b.action_mask is not None for b in batches)
    return RolloutBatch(
        prompt_ids=torch.cat([_pad_to(b.prompt_ids, p, pad_id, True) for b in batches]),
        prompt_mask=torch.cat([_pad_to(b.prompt_mask, p, 0, True) for b in batches]),
        completion_ids=torch.cat([_pad_to(b.completion_ids, t, pad_id, False) for b in batches]),
        completion_mask=torch.cat([_pad_to(b.completion_mask, t, 0, False) for b in batches]),
        group_ids=torch.cat([b.group_ids + o for b, o in zip(batches, offsets)]),
        sampling_logp=torch.cat([_pad_to(b.sampling_logp, t, 0.0, False) for b in batches]),
        truncated=torch.cat([b.truncated for b in batches]),
        entropy=torch.cat([_pad_to(b.entropy, t, 0.0, False) for b in batches]) if has_entropy else None,
        prompts=[x for b in batches for x in b.prompts],
        completions=[x for b in batches for x in b.completions],
        rows=[x for b in batches for x in b.rows],
        weights_version=min(b.weights_version for b in batches),
        engine=batches[0].engine,
        action_mask=torch.cat([_pad_to(b.unit_mask, t, 0, False) for b in batches]) if multi_turn else None,
        episodes=[x for b in batches for x in b.episodes] if all(b.episodes for b in batches) else [],
    )


def with_prompts(
    batch: RolloutBatch, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, prompts: list[str], rows: list[dict[str, Any]]
) -> RolloutBatch:
    """The same completions under other prompts: ``prompt_ids, prompt_mask [B, P']`` (left-padded), texts and data rows."""
    return dataclasses.replace(batch, prompt_ids=prompt_ids, prompt_mask=prompt_mask, prompts=list(prompts), rows=list(rows))


def splice_completions(
    batch: RolloutBatch, keep: list[int], suffixes: list[list[int]], completions: list[str], pad_id: int
) -> tuple[RolloutBatch, torch.Tensor]:
    """Row i's completion cut to its first ``keep[i]`` tokens, then the token ids ``suffixes[i]``.

    Returns the batch (right-padded to the longest row; the appended tokens have sampling
    log-prob 0 and count in ``completion_mask``; no entropies; nothing truncated) and
    ``suffix_mask [B, T']``, 1 on the appended tokens. ``completions``: the new decoded texts.
    """
    device = batch.completion_ids.device
    width = max([k + len(s) for k, s in zip(keep, suffixes)] + [1])
    ids = torch.full((len(batch), width), pad_id, dtype=batch.completion_ids.dtype, device=device)
    mask = torch.zeros((len(batch), width), dtype=batch.completion_mask.dtype, device=device)
    suffix_mask = torch.zeros_like(mask)
    logp = torch.zeros((len(batch), width), dtype=batch.sampling_logp.dtype, device=device)
    for i, (k, suffix) in enumerate(zip(keep, suffixes)):
        end = k + len(suffix)
        ids[i, :k], logp[i, :k] = batch.completion_ids[i, :k], batch.sampling_logp[i, :k]
        ids[i, k:end] = torch.tensor(suffix, dtype=ids.dtype, device=device)
        mask[i, :end] = 1
        suffix_mask[i, k:end] = 1
    truncated = torch.zeros_like(batch.truncated)
    out = dataclasses.replace(batch, completion_ids=ids, completion_mask=mask, sampling_logp=logp, truncated=truncated,
                              entropy=None, completions=list(completions))
    return out, suffix_mask


def renumber_groups(group_ids: torch.Tensor) -> torch.Tensor:
    """Map group ids to 0..n-1 in order of first appearance (after rows were dropped)."""
    _, inverse = torch.unique(group_ids, return_inverse=True)
    return inverse
