"""A policy family defined outside grpokit, for the plugin tests: a position-wise digit policy.

The "model" ``toy-digits`` holds one logit vector per completion position, ``logits [T, 10]``,
and ignores the prompt: a completion is T digits drawn independently, ``pi(d_1..d_T) =
prod_t softmax(logits[t])[d_t]``; its units are the T digits. Nothing here is imported by
grpokit: the tests register it through ``model.family: 'tests/plugins/toy_family.py:ToyDigits'``
or through a ``grpokit.plugins`` entry point.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import torch
from safetensors.torch import save_file

from grpokit.families import FAMILIES, Capabilities, Claim, Family
from grpokit.families.policy import ModulePolicy, UnitForward
from grpokit.rollout.types import RolloutBatch, SamplingParams

LENGTH = 6


class DigitsModule(torch.nn.Module):
    def __init__(self, length: int = LENGTH) -> None:
        super().__init__()
        self.logits = torch.nn.Parameter(torch.zeros(length, 10))

    def save_pretrained(self, folder: Any, **_: Any) -> None:
        Path(folder).mkdir(parents=True, exist_ok=True)
        save_file({"logits": self.logits.detach().contiguous()}, str(Path(folder) / "model.safetensors"))
        (Path(folder) / "config.json").write_text(json.dumps({"model_type": "toy_digits", "length": self.logits.shape[0]}))


class DigitsTokenizer:
    """What the trainer saves and reads of a tokenizer: nothing but a name."""

    def save_pretrained(self, folder: Any, **_: Any) -> None:
        (Path(folder) / "toy_tokenizer.json").write_text("{}")


class DigitsBackend:
    """Held-out evaluation's sampler: greedy = the arg-max digit at every position."""

    pad_id = 0

    def __init__(self, policy: "DigitsPolicy") -> None:
        self.policy = policy

    def generate(self, prompts: list[str], rows: list[dict], group_size: int, params: SamplingParams, **_: Any) -> RolloutBatch:
        return self.policy.sample(prompts, rows, group_size, params)


class DigitsPolicy(ModulePolicy):
    capabilities = Capabilities(unit_kind="token", entropy=True, prompt_kv_sharing=False)

    def __init__(self, module: DigitsModule, reference: Optional[DigitsModule], seed: int) -> None:
        self.module, self.reference = module, reference
        self.backend = DigitsBackend(self)
        self.generator = torch.Generator(device="cpu").manual_seed(seed)

    def render(self, rows: list[dict], system_prompt: Optional[str]) -> list[str]:
        return [str(row["prompt"]) for row in rows]

    def begin_step(self, step: int) -> None:
        pass

    def sampler_metrics(self) -> dict[str, float]:
        return {"toy/p_seven": float(self.module.logits.detach().softmax(-1)[:, 7].mean())}

    def sample(self, prompts: list[str], rows: list[dict], group_size: int, params: SamplingParams) -> RolloutBatch:
        logits = self.module.logits.detach()
        n, (length, _) = len(prompts) * group_size, logits.shape
        if params.greedy:
            digits = logits.argmax(-1).expand(n, length).clone()
        else:
            probs = (logits / params.temperature).softmax(-1).cpu()
            digits = torch.multinomial(probs.repeat(n, 1), 1, generator=self.generator).view(n, length).to(logits.device)
        logp_all = logits.log_softmax(-1)
        logp = logp_all.gather(-1, digits.T).T if digits.numel() else digits.float()
        device = logits.device
        ones = torch.ones(n, length, dtype=torch.long, device=device)
        return RolloutBatch(
            prompt_ids=torch.zeros(n, 1, dtype=torch.long, device=device), prompt_mask=torch.ones(n, 1, dtype=torch.long, device=device),
            completion_ids=digits, completion_mask=ones, group_ids=torch.arange(len(prompts), device=device).repeat_interleave(group_size),
            sampling_logp=logp, truncated=torch.zeros(n, dtype=torch.bool, device=device),
            entropy=-(logp_all.exp() * logp_all).sum(-1).expand(n, length).clone(),
            prompts=[p for p in prompts for _ in range(group_size)],
            completions=["".join(str(int(d)) for d in row) for row in digits],
            rows=[r for r in rows for _ in range(group_size)],
        )

    def _logp(self, module: DigitsModule, mb: RolloutBatch) -> tuple[torch.Tensor, torch.Tensor]:
        logp_all = module.logits.log_softmax(-1)  # [T, 10]
        logp = logp_all.gather(-1, mb.completion_ids.T).T  # [b, T]
        entropy = -(logp_all.exp() * logp_all).sum(-1).expand_as(logp)
        return logp, entropy

    def score(self, mb: RolloutBatch, role: str = "current") -> torch.Tensor:
        module, context = self.role_module(role)
        with torch.no_grad(), context:
            return self._logp(module, mb)[0]

    def learn_forward(self, mb: RolloutBatch, *, with_entropy: bool, entropy_grad: bool) -> UnitForward:
        logp, entropy = self._logp(self.module, mb)
        return UnitForward(logp=logp, entropy=entropy if with_entropy else None, backward=lambda loss: loss.backward())


class ToyDigits(Family):
    name = "toy_digits"
    description = "test-only: T independent digits per completion (tests/plugins/toy_family.py)"
    embedded = {"toy-digits": "a zero-initialised [6, 10] logit table"}

    def claim(self, model_name: str) -> Claim:
        return Claim.SPECIFIC if model_name == "toy-digits" else Claim.NO

    def capabilities(self, cfg: Any) -> Capabilities:
        return DigitsPolicy.capabilities

    def config_problem(self, cfg: Any) -> Optional[str]:
        return "environment.name: the toy digits family has no episodes; set environment.name=null" if cfg.environment.name else None

    def load(self, cfg: Any, device: torch.device):
        return DigitsModule().to(device), DigitsTokenizer()

    def build_policy(self, cfg, model, tokenizer, *, reference, needs_ref, needs_teacher, learners):
        return DigitsPolicy(model, reference, cfg.train.seed)


def register() -> None:
    """The entry point's target (``grpokit.plugins`` group): register the family once."""
    if "toy_digits" not in FAMILIES:
        FAMILIES.register(ToyDigits())
