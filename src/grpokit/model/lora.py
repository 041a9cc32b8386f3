"""LoRA adapters through peft, saved with a portable base-model name."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import torch

from grpokit.config.schema import LoraConfig

log = logging.getLogger(__name__)


def apply_lora(model: torch.nn.Module, cfg: LoraConfig) -> torch.nn.Module:
    """Wrap ``model`` with trainable LoRA adapters on ``cfg.target_modules`` (others frozen)."""
    from peft import LoraConfig as PeftLoraConfig
    from peft import get_peft_model

    present = {name.split(".")[-1] for name, _ in model.named_modules()}
    targets = [m for m in cfg.target_modules if m in present]
    if not targets:
        raise ValueError(
            f"model.lora.target_modules {cfg.target_modules} match no module of this model; "
            f"pick from e.g. {sorted(present)[:12]}"
        )
    missing = [m for m in cfg.target_modules if m not in present]
    if missing and list(cfg.target_modules) != LoraConfig().target_modules:
        # names the user chose that match nothing would silently get no adapter (a typo, another architecture's name)
        raise ValueError(f"model.lora.target_modules: {missing} match no module of this model: drop them or pick from "
                         f"e.g. {sorted(present)[:12]}")
    if missing:  # the default list names every projection of a Llama-style block; other models lack some
        log.info("LoRA adapters on %s (%s not in this model)", targets, missing)
    peft_cfg = PeftLoraConfig(
        r=cfg.r, lora_alpha=cfg.alpha, lora_dropout=cfg.dropout, target_modules=targets, task_type="CAUSAL_LM"
    )
    return get_peft_model(model, peft_cfg)


def portable_base(name_or_path: str) -> str:
    """The name to record as an adapter's base model for the folder ``name_or_path`` it was loaded from.

    A grpokit cache folder (``<cache>/models/<key>``, with ``grpokit-source.json``) becomes the
    embedded model's name, or for a user's GGUF that .gguf file; a Hub cache snapshot
    (``models--org--name/snapshots/<hash>``) becomes ``org/name``; anything else (the user's own
    folder, a name) is returned as it is.
    """
    from grpokit.model import hub
    from grpokit.model.loading import EMBEDDED_MODELS, cache_dir

    path = Path(name_or_path).expanduser()
    source = path / "grpokit-source.json"  # written by loading._build_cache next to the dequantised weights
    if source.is_file() or path.parent == cache_dir() / "models":
        if path.name in EMBEDDED_MODELS:
            return path.name
        if source.is_file():
            return json.loads(source.read_text())["gguf"]
    if path.parent.name == "snapshots" and hub.hub_id_of(path):
        return hub.hub_id_of(path)
    return name_or_path


def make_adapter_portable(folder: Path) -> str:
    """Rewrite the base model peft recorded in the adapter saved at ``folder``; returns the name written.

    peft's ``save_pretrained`` records the folder transformers loaded the base model from
    (``name_or_path``) in ``adapter_config.json`` (``base_model_name_or_path``) and in the model
    card (``README.md``, ``base_model:``). For grpokit that folder is a cache of this machine, e.g.
    the dequantised GGUF under ``~/.cache/grpokit/models/`` or a snapshot in the Hub cache, which
    means nothing on another machine. Written instead (:func:`portable_base`):

    - ``adapter_config.json``: the embedded name (``smollm2-135m-instruct``: the dequantised Q4_1
      weights the adapter was trained on, which ``grpokit eval`` and ``model.name`` load anywhere
      grpokit is installed), the Hub id (``org/name``) of a model from the Hub cache, the .gguf
      file of a user's GGUF, or the user's own folder as it was;
    - ``README.md``: ``base_model`` is a Hub id, as the Hub's model cards expect: the Hub model an
      embedded model was made from (``HuggingFaceTB/SmolLM2-135M-Instruct``; its full-precision
      weights differ slightly from the Q4_1 ones), the Hub id itself, or no entry for a local path.

    Loading back is ``PeftModel.from_pretrained(load_model(base)[0], folder)``, as ``grpokit eval`` does.
    """
    from grpokit.model import hub
    from grpokit.model.loading import EMBEDDED_MODELS

    config_file = folder / "adapter_config.json"
    config = json.loads(config_file.read_text())
    recorded = config.get("base_model_name_or_path")
    if not recorded:
        return ""
    base = portable_base(recorded)
    config["base_model_name_or_path"] = base
    config_file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    readme = folder / "README.md"
    if readme.is_file():
        from huggingface_hub import ModelCard

        card = ModelCard.load(readme)
        embedded = EMBEDDED_MODELS.get(base)
        if embedded is not None:
            hub_base = embedded.hub_id or None
        else:
            hub_base = base if hub.is_hub_id(base) and not Path(base).expanduser().exists() else None
        card.data.base_model = hub_base
        # peft also tags the card "base_model:adapter:<name_or_path>" (the Hub's adapter link)
        tags = [t for t in card.data.tags or [] if not t.startswith("base_model:adapter:")]
        card.data.tags = tags + ([f"base_model:adapter:{hub_base}"] if hub_base else []) or None
        card.save(readme)
    if base != recorded:
        log.debug("adapter base %s recorded as %s", recorded, base)
    return base
