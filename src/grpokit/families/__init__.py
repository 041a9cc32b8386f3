"""Policy families as registered plugins: which family a model belongs to, and everything family-specific.

A *family* is a kind of policy (a text causal LM, a vision-language model, a masked-diffusion
LM, an image-token masked model, a flow-matching image model). It owns what only it knows: which
models it can load (:meth:`Family.claim`), what its policy can give the trainer
(:meth:`Family.capabilities`), the load-time checks of a run and of its rows, how its model loads,
how its :class:`~grpokit.families.policy.Policy` is built, and what a checkpoint must save beside
the weights. The trainer, the learner and the setup code talk to a ``Family`` and a ``Policy``
only; no module of ``grpokit.trainer`` imports a family's folder.

``model.family: auto`` asks every registered family to claim ``model.name``: a family that
recognises the model as its own (a marker file, its model type, its embedded name) claims it
``SPECIFIC``; one that could load any model of a generic kind (the causal-LM family, for a
Hugging Face folder) claims it ``GENERIC``. The single strongest claimant wins; a tie is refused
in one line that lists the claimants and says to set ``model.family``. ``model.family`` may also
name a registered family or a ``module:object`` / ``file.py:object`` that is a :class:`Family`.

Built-in families register from :mod:`grpokit.builtins`; third parties register theirs with
``FAMILIES.register(MyFamily())`` in a module loaded through the ``grpokit.plugins`` entry point
group or the config's ``plugins`` list, with no edit to grpokit.
"""

from __future__ import annotations

import enum
from typing import Any, Iterator, Optional

import torch

from grpokit.families.policy import Capabilities, Policy


class Claim(enum.IntEnum):
    """How strongly a family claims a model name (see the module docstring)."""

    NO = 0
    GENERIC = 1
    SPECIFIC = 2


class Family:
    """The seam between the trainer and one kind of policy. Subclass it and override what your family needs.

    Attributes:
        name:        registry name (``model.family``), e.g. ``causal_lm``.
        description: one line for ``grpokit list`` and the docs.
        sections:    the config sections that hold this family's own options (e.g. ``("vision",)``).
        embedded:    embedded model names this family builds or ships -> one-line description.
    """

    name: str = ""
    description: str = ""
    sections: tuple[str, ...] = ()
    embedded: dict[str, str] = {}

    # ------------------------------------------------------------------ which models
    def claim(self, model_name: str) -> Claim:
        """How strongly this family claims ``model.name`` (cheap: names and files, never a model load)."""
        return Claim.SPECIFIC if model_name in self.embedded else Claim.NO

    def unclaimed_hint(self, model_name: str) -> Optional[str]:
        """What this family would need to load ``model.name`` when no family claims it (added to the one-line error), or None."""
        return None

    def claim_model(self, model: torch.nn.Module, tokenizer: Any) -> Claim:
        """How strongly this family claims a model object passed from Python (``grpokit.Trainer(cfg, model=...)``)."""
        return Claim.NO

    # ------------------------------------------------------------------ load-time contract
    def capabilities(self, cfg: Any) -> Capabilities:
        """What this family's policy gives the trainer under ``cfg`` (read by the load-time checks, before any model loads)."""
        raise NotImplementedError

    def requirement_problem(self, cfg: Any) -> Optional[str]:
        """A missing optional dependency of the family (one line: what to install), checked before every other check."""
        return None

    def config_problem(self, cfg: Any) -> Optional[str]:
        """Why ``cfg`` cannot run with this family (one line naming the field and the fix), or None."""
        return None

    def data_problem(self, cfg: Any, rows: list[dict], needs: set[str]) -> Optional[str]:
        """Why the training ``rows`` cannot feed this family under ``cfg`` (one line), or None. ``needs``: the run's inputs."""
        return None

    # ------------------------------------------------------------------ building the run
    def load(self, cfg: Any, device: torch.device) -> tuple[torch.nn.Module, Any]:
        """``(model, tokenizer)`` of ``cfg.model.name`` on ``device`` (with LoRA when the config enables it)."""
        raise NotImplementedError

    def build_policy(self, cfg: Any, model: torch.nn.Module, tokenizer: Any, *, reference: Optional[torch.nn.Module],
                     needs_ref: bool, needs_teacher: bool, learners: Any) -> Policy:
        """The run's Policy. ``reference``: the frozen copy the setup made (None: LoRA's adapter-off base, or none needed)."""
        raise NotImplementedError

    def build_offline_policy(self, cfg: Any, model: torch.nn.Module, tokenizer: Any, *, reference: Optional[torch.nn.Module],
                             needs_ref: bool) -> Policy:
        """The Policy of an offline stage (sft, dpo, kto, …): log-probs of the data's own completions at temperature 1."""
        raise ValueError(f"stage '{cfg.stage}' trains text causal LMs only; model.name '{cfg.model.name}' is of family "
                         f"'{self.name}': set stage=grpo")

    def checkpoint_extras(self, policy: Policy) -> tuple:
        """Objects with ``save_pretrained(folder)`` a checkpoint writes beside the weights (e.g. an image processor)."""
        return ()

    def __repr__(self) -> str:
        return f"<family {self.name}>"


class FamilyRegistry:
    """Name -> :class:`Family`; duplicate names are an error. Built-ins load on first use."""

    def __init__(self) -> None:
        self._families: dict[str, Family] = {}

    def register(self, family: Family) -> Family:
        """Add ``family`` (an instance); returns it so a module can write ``FAMILY = FAMILIES.register(MyFamily())``."""
        if not isinstance(family, Family):
            raise TypeError(f"a family must be a grpokit.families.Family instance, got {type(family).__name__}")
        if not family.name:
            raise ValueError(f"{type(family).__name__} has no name")
        if family.name in self._families and self._families[family.name] is not family:
            raise ValueError(f"family '{family.name}' is already registered")
        self._families[family.name] = family
        return family

    def _loaded(self) -> dict[str, Family]:
        from grpokit.builtins import load_plugins

        load_plugins()
        return self._families

    def get(self, name: str) -> Family:
        """The family registered as ``name``, or the :class:`Family` a ``module:object`` spec names."""
        from grpokit.plugins import import_object, is_import_spec

        families = self._loaded()
        if name in families:
            return families[name]
        if is_import_spec(name):
            family = import_object(name, "model.family")
            family = family() if isinstance(family, type) else family
            if not isinstance(family, Family):
                raise ValueError(f"model.family '{name}' is a {type(family).__name__}, not a grpokit.families.Family")
            known = families.get(family.name)
            if known is not None and type(known) is type(family):  # the same spec named again: the instance registered first
                return known
            return self.register(family)
        raise ValueError(f"model.family '{name}' is not a registered family; choose auto, one of {', '.join(sorted(families))}, "
                         "or 'module:object' naming a grpokit.families.Family")

    def names(self) -> list[str]:
        return sorted(self._loaded())

    def __iter__(self) -> Iterator[Family]:
        return iter([self._loaded()[n] for n in self.names()])

    def __contains__(self, name: object) -> bool:
        return name in self._loaded()

    def embedded_models(self) -> dict[str, str]:
        """Every embedded model name of every family -> its description."""
        return {name: desc for family in self for name, desc in family.embedded.items()}

    def for_name(self, model_name: str, choice: str = "auto") -> Family:
        """The family of ``model.name``: ``choice`` when it names one, else the single strongest claimant (one-line errors)."""
        if choice != "auto":
            return self.get(choice)
        return self._strongest({f.name: f.claim(model_name) for f in self}, f"model.name '{model_name}'", self.unclaimed_message(model_name))

    def for_model(self, model: torch.nn.Module, tokenizer: Any, choice: str = "auto") -> Family:
        """The family of a model object passed from Python (``model.family`` when set)."""
        if choice != "auto":
            return self.get(choice)
        what = f"the {type(model).__name__} passed as model="
        return self._strongest({f.name: f.claim_model(model, tokenizer) for f in self}, what,
                               f"{what} is claimed by no family ({', '.join(self.names())}): set model.family")

    def _strongest(self, claims: dict[str, Claim], what: str, none_message: str) -> Family:
        best = max(claims.values(), default=Claim.NO)
        if best == Claim.NO:
            raise ValueError(none_message)
        top = sorted(n for n, c in claims.items() if c == best)
        if len(top) > 1:
            raise ValueError(f"{what} is claimed by the families {top} alike: set model.family to the one to use")
        return self._families[top[0]]

    def unclaimed_message(self, model_name: str) -> str:
        """The one-line error for a model.name no family claims."""
        from pathlib import Path

        embedded = ", ".join(sorted(self.embedded_models()))
        what = "does not exist" if not Path(model_name).expanduser().exists() else "is no model any family can load"
        hints = [hint for family in self if (hint := family.unclaimed_hint(model_name))]
        return (f"model.name '{model_name}' {what}: give an embedded model ({embedded}), a model folder "
                "(Hugging Face layout), a .gguf file, a Hub id in the local Hugging Face cache, or a grpokit run folder"
                + "".join(f"; {hint}" for hint in hints))


FAMILIES = FamilyRegistry()


def family_of(cfg: Any, model: Optional[torch.nn.Module] = None, tokenizer: Any = None) -> Family:
    """The family of a run: of the model object when one is given, else of ``cfg.model.name`` (``cfg.model.family`` decides when set)."""
    choice = getattr(cfg.model, "family", "auto") or "auto"
    if model is not None:
        return FAMILIES.for_model(model, tokenizer, choice)
    return FAMILIES.for_name(cfg.model.name, choice)


__all__ = ["Capabilities", "Claim", "FAMILIES", "Family", "FamilyRegistry", "Policy", "family_of"]
