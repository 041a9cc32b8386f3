"""Sampling with Hugging Face transformers' ``generate`` (CPU or GPU)."""

from __future__ import annotations

import torch

from grpokit.rollout.types import RolloutBatch, SamplingParams


def completion_mask_from_eos(completion_ids: torch.Tensor, eos_ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Mask ``[B, T]`` that keeps tokens up to and including the first EOS, and truncated ``[B]``.

    Rows without any EOS are truncated (they hit the length cap) and keep every token.
    """
    is_eos = torch.zeros_like(completion_ids, dtype=torch.bool)
    for e in eos_ids:
        is_eos |= completion_ids == e
    seen_before = (is_eos.cumsum(-1) - is_eos.long()) > 0  # an EOS strictly earlier
    mask = (~seen_before).long()
    truncated = ~is_eos.any(-1)
    return mask, truncated


class HFBackend:
    """GenerationBackend over a transformers causal LM and its tokenizer."""

    def __init__(self, model: torch.nn.Module, tokenizer) -> None:
        self.model = model
        self.tokenizer = tokenizer
        eos = model.generation_config.eos_token_id
        eos = eos if eos is not None else tokenizer.eos_token_id
        self.eos_ids = list(eos) if isinstance(eos, (list, tuple)) else [eos]
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_ids[0]

    @torch.no_grad()
    def generate(
        self, prompt_texts: list[str], rows: list[dict], group_size: int, params: SamplingParams
    ) -> RolloutBatch:
        """Sample ``group_size`` completions per prompt; rows are ordered prompt-major."""
        enc = self.tokenizer(prompt_texts, return_tensors="pt", padding=True, add_special_tokens=False)
        was_training = self.model.training
        self.model.eval()
        kwargs = dict(
            max_new_tokens=params.max_new_tokens,
            num_return_sequences=group_size,
            pad_token_id=self.pad_id,
            eos_token_id=self.eos_ids,
            return_dict_in_generate=True,
            output_scores=True,
        )
        if params.greedy:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        else:
            kwargs.update(do_sample=True, temperature=params.temperature, top_p=params.top_p, top_k=params.top_k or None)
        out = self.model.generate(input_ids=enc.input_ids, attention_mask=enc.attention_mask, **kwargs)
        if was_training:
            self.model.train()
        prompt_len = enc.input_ids.shape[1]
        completion_ids = out.sequences[:, prompt_len:]  # [B, T]
        # Per-token log-prob under the processed (temperature / top-p) distribution.
        scores = torch.stack(out.scores, dim=1).float()  # [B, T, V]
        sampling_logp = torch.log_softmax(scores, dim=-1).gather(-1, completion_ids.unsqueeze(-1)).squeeze(-1)
        del scores
        mask, truncated = completion_mask_from_eos(completion_ids, self.eos_ids)
        completion_ids = torch.where(mask.bool(), completion_ids, torch.full_like(completion_ids, self.pad_id))
        sampling_logp = sampling_logp.masked_fill(~mask.bool(), 0.0)
        group_ids = torch.arange(len(prompt_texts)).repeat_interleave(group_size)
        completions = self.tokenizer.batch_decode(
            [ids[m.bool()] for ids, m in zip(completion_ids, mask)], skip_special_tokens=True
        )
        return RolloutBatch(
            prompt_ids=enc.input_ids.repeat_interleave(group_size, 0),
            prompt_mask=enc.attention_mask.repeat_interleave(group_size, 0),
            completion_ids=completion_ids,
            completion_mask=mask,
            group_ids=group_ids,
            sampling_logp=sampling_logp,
            truncated=truncated,
            prompts=[rows[g]["prompt"] for g in group_ids.tolist()],
            completions=completions,
            rows=[rows[g] for g in group_ids.tolist()],
        )
