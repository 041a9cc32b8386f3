"""What TRL's ``GRPOTrainer(model=..., reward_funcs=...)`` strings name, resolved offline.

TRL (https://huggingface.co/docs/trl/grpo_trainer) takes ``model`` as a Hub id or a local folder
and loads it with ``AutoModelForCausalLM.from_pretrained``; a ``reward_funcs`` string is a reward
model (``AutoModelForSequenceClassification`` with one label) whose logit scores
``prompt + completion``. grpokit runs offline: a Hub id is read from the local Hugging Face cache
(``local_files_only``), never downloaded; grpokit's embedded name ``"smollm2"`` and its own reward
model folders (``grpokit rm train``) are understood too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from grpokit.config.schema import RewardConfig

MODEL_ALIASES = {"smollm2": "smollm2-135m-instruct"}  # the embedded SmolLM2-135M-Instruct (GGUF)


class SourceError(ValueError):
    """A model or reward-model name that is neither a local folder, an embedded name nor in the local cache."""


def resolve_model_name(name: str, what: str = "model") -> str:
    """A name grpokit's loaders read: an embedded name, a local path, or the cached snapshot folder of a Hub id
    (:func:`grpokit.model.hub.find_cached`; not cached: its one-line problem)."""
    from grpokit.model import hub
    from grpokit.model.loading import EMBEDDED_MODELS

    name = MODEL_ALIASES.get(name, name)
    if name in EMBEDDED_MODELS or Path(name).expanduser().exists():
        return name
    if "/" in name and hub.is_hub_id(name):
        folder, problem = hub.find_cached(name)
        if folder is not None:
            return str(folder)
        raise SourceError(f"{what}: {problem}")
    raise SourceError(f"{what} '{name}' is not a local folder, an embedded model ({', '.join(['smollm2', *sorted(EMBEDDED_MODELS)])}) "
                      "nor a Hub id (org/name) in the local Hugging Face cache")


def reward_from_string(spec: str, tokenizer: Any = None) -> Any:
    """The reward a ``reward_funcs`` string names: a grpokit reward name / ``module:function`` (as given), a
    grpokit reward-model folder (``rm_score``), or a sequence-classification model folder / cached Hub id."""
    from grpokit.rewards.loading import is_builtin

    if is_builtin(spec) or (":" in spec and not Path(spec).exists()):
        return spec
    folder = Path(resolve_model_name(spec, "reward model"))
    from grpokit.rewards.reward_model import CONFIG_FILE, HEADS_FILE

    if (folder / CONFIG_FILE).is_file() and (folder / HEADS_FILE).is_file():
        return RewardConfig(name="rm_score", kwargs={"model_path": str(folder)})
    return SequenceClassifierReward(folder, tokenizer)


class SequenceClassifierReward:
    """TRL's reward-model reward: the first logit of ``AutoModelForSequenceClassification(num_labels=1)``.

    As TRL's ``_calculate_rewards``: a conversation is rendered with the reward tokenizer's chat
    template (prompt messages + the assistant completion), a plain prompt is concatenated with its
    completion; texts are right-padded and scored in one batch, without special tokens added.
    Reported under the folder's name, as TRL names it by the model id's last part.
    """

    def __init__(self, folder: Path, tokenizer: Any = None) -> None:
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self.model = AutoModelForSequenceClassification.from_pretrained(folder, num_labels=1, local_files_only=True).eval()
        self.tokenizer = tokenizer or AutoTokenizer.from_pretrained(folder, local_files_only=True)
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model.config.pad_token_id = self.tokenizer.pad_token_id
        self.__name__ = Path(folder).name
        self._torch = torch

    def __call__(self, prompts: list, completions: list, **_: Any) -> list[float]:
        if prompts and isinstance(prompts[0], list):  # conversational: messages + the completion message
            texts = [self.tokenizer.apply_chat_template(p + c, tokenize=False) for p, c in zip(prompts, completions)]
        else:
            texts = [p + c for p, c in zip(prompts, completions)]
        device = next(self.model.parameters()).device
        inputs = self.tokenizer(texts, return_tensors="pt", padding=True, padding_side="right", add_special_tokens=False).to(device)
        with self._torch.inference_mode():
            return self.model(**inputs).logits[:, 0].float().tolist()
