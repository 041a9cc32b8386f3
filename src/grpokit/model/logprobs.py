"""Per-token log-probs and entropies of completions under a causal LM.

Only the completion positions go through the LM head (``logits_to_keep``), and the
log-softmax is taken over sequence chunks, so at most ``[B, chunk, V]`` extra floats exist at once.
"""

from __future__ import annotations

from typing import Optional

import torch


def token_logprobs_from_logits(
    logits: torch.Tensor, targets: torch.Tensor, chunk: int = 64, with_entropy: bool = False
) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """log softmax(logits)[target] and (optionally, no grad) entropy, each ``[B, T]``.

    logits: [B, T, V]; targets: [B, T]. Computed chunk by chunk over T:
    logp = logit[target] - logsumexp(logit); H = logsumexp - sum softmax * logit.
    """
    logps, ents = [], []
    for s in range(0, logits.shape[1], chunk):
        lg = logits[:, s : s + chunk].float()
        lse = torch.logsumexp(lg, dim=-1)  # [B, c]
        logps.append(lg.gather(-1, targets[:, s : s + chunk].unsqueeze(-1)).squeeze(-1) - lse)
        if with_entropy:
            with torch.no_grad():
                p = torch.softmax(lg, dim=-1)
                ents.append(lse - (p * lg).sum(-1))
    logp = torch.cat(logps, dim=1)
    return logp, (torch.cat(ents, dim=1) if with_entropy else None)


def completion_logprobs(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """log pi(o_t | q, o_<t) for every completion token, ``[B, T]`` (and entropy ``[B, T]``).

    prompt_ids/prompt_mask: [B, P] left-padded; completion_ids/completion_mask: [B, T]
    right-padded. Position ids follow the attention mask, as in generation, so the
    learner scores exactly what the sampler produced. Logits are divided by ``temperature``.
    """
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
    attention = torch.cat([prompt_mask, completion_mask], dim=1)
    position_ids = (attention.cumsum(-1) - 1).clamp(min=0)
    t = completion_ids.shape[1]
    out = model(
        input_ids=input_ids,
        attention_mask=attention,
        position_ids=position_ids,
        logits_to_keep=t + 1,
        use_cache=False,
    )
    logits = out.logits[:, :-1]  # [B, T, V]: position P-1+t predicts completion token t
    if temperature != 1.0:
        logits = logits / temperature
    logp, entropy = token_logprobs_from_logits(logits, completion_ids, with_entropy=with_entropy)
    return logp * completion_mask, (entropy * completion_mask if entropy is not None else None)
