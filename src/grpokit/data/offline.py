"""Datasets of the offline stages in TRL's formats, checked at load and tokenized once.

| stage | columns (TRL's name of the format)                       | one example                         |
|-------|----------------------------------------------------------|-------------------------------------|
| sft   | prompt, completion ("prompt-completion")                 | one completion                      |
| dpo   | prompt, chosen, rejected ("preference", explicit prompt) | a chosen and a rejected completion  |
| kto   | prompt, completion, label ("unpaired preference")        | one completion, desirable or not    |

A prompt is a string (the user message, rendered with ``data.system_prompt`` through the chat
template exactly as GRPO prompts are: :func:`grpokit.data.chat.render_prompt`) or a
conversational list of ``{role, content}`` messages. A completion is a string, to which the
sampler's stop token (EOS) is appended as TRL appends ``eos_token``, or a list of messages
(conversational): then it is the text the chat template renders after the prompt for
``prompt + completion``, as TRL's ``apply_chat_template`` splits it. ``kto`` also takes a
preference dataset and unpairs it as TRL does (chosen -> label true, rejected -> label false).
Other columns stay with the row (``data.answer_column`` becomes ``answer`` for held-out accuracy).
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field
from typing import Any, Optional

from grpokit.config.schema import DataConfig
from grpokit.data.chat import is_conversation, message_problem, render_prompt
from grpokit.data.files import DataError, load_rows, prompt_key
from grpokit.data.tasks import TaskSplits

logger = logging.getLogger(__name__)

STAGE_COLUMNS = {"sft": ("completion",), "dpo": ("chosen", "rejected"), "kto": ("completion", "label")}
STAGE_FORMATS = {
    "sft": "TRL's prompt-completion format {prompt, completion}",
    "dpo": "TRL's preference format {prompt, chosen, rejected}",
    "kto": "TRL's unpaired preference format {prompt, completion, label} (or a preference dataset {prompt, chosen, rejected})",
}


@dataclass
class Example:
    """One tokenized training unit: a prompt and its completion(s).

    completions: [completion] (sft, kto) or [chosen, rejected] (dpo), each a list of token ids
    loss_masks: per completion, None (every token is trained) or a 0/1 list as long as it: a
                conversation of several messages trains only its assistant messages' tokens
    label: desirable (kto); None otherwise. row: the data row (answer and other columns).
    """

    prompt_ids: list[int]
    completions: list[list[int]]
    label: Optional[bool] = None
    row: dict[str, Any] = field(default_factory=dict)
    key: str = ""  # the prompt's identity (rows with equal keys share one prompt forward)
    loss_masks: list[Optional[list[int]]] = field(default_factory=list)

    def mask(self, k: int) -> Optional[list[int]]:
        return self.loss_masks[k] if self.loss_masks else None


def load_offline_splits(cfg: DataConfig, stage: str, environment: Any = None) -> TaskSplits:
    """Train and held-out rows of ``data.path`` (and ``data.heldout_path``) for ``stage``, checked.

    Without a held-out file, whole prompts are held out (``data.heldout_fraction``, seeded), so
    a prompt's rows (a KTO prompt with a desirable and an undesirable completion) stay together.
    SFT without a file on a built-in task whose rows carry expert turns (``text_navigation``):
    the expert episodes replayed in ``environment`` (the run's ``environment`` section), as
    multi-turn conversations (:mod:`grpokit.envs.imitation`); with ``data.demonstrations``, the
    completions that writer makes of the task's rows (:mod:`grpokit.data.demonstrations`).
    """
    if cfg.demonstrations and (cfg.path or stage != "sft" or not cfg.task):
        raise DataError(f"data.demonstrations '{cfg.demonstrations}' writes SFT completions for a built-in task: use it with stage sft and data.task, without data.path (set data.demonstrations=null otherwise)")
    if not cfg.path and stage == "sft" and cfg.task and cfg.demonstrations:
        return _demonstration_splits(cfg)
    if not cfg.path and stage == "sft" and cfg.task:
        return _imitation_splits(cfg, environment)
    if not cfg.path:
        raise DataError(f"stage '{stage}' trains on a dataset file: set data.path to a .jsonl/.json/.csv/.parquet file in {STAGE_FORMATS[stage]}")
    rows = _load(cfg.path, cfg, stage)
    if cfg.heldout_path:
        heldout = _load(cfg.heldout_path, cfg, stage)
        logger.info("data: %d training rows from %s; %d held out for evaluation from %s (data.heldout_path; "
                    "data.heldout_fraction unused)", len(rows), cfg.path, len(heldout), cfg.heldout_path)
        return TaskSplits(train=rows, heldout=heldout)
    return split_by_prompt(rows, cfg.heldout_fraction, cfg.seed, source=cfg.path)


def _demonstration_splits(cfg: DataConfig) -> TaskSplits:
    from grpokit.data.demonstrations import demonstration_splits
    from grpokit.trainer.setup import build_splits

    try:
        return demonstration_splits(cfg, build_splits(cfg))
    except ValueError as exc:
        raise DataError(str(exc)) from None


def _imitation_splits(cfg: DataConfig, environment: Any) -> TaskSplits:
    from grpokit.envs.imitation import imitation_rows
    from grpokit.trainer.setup import build_splits

    splits = build_splits(cfg)
    if not any(row.get("expert_turns") for row in splits.train):
        raise DataError(f"stage 'sft' on data.task '{cfg.task}': its rows carry no expert turns to imitate; set data.path to a file in {STAGE_FORMATS['sft']}")
    name = environment.name if environment is not None else None
    options = environment.options if environment is not None else {}
    role = environment.observation_role if environment is not None else "user"
    try:
        return TaskSplits(train=imitation_rows(splits.train, name, options, role), heldout=imitation_rows(splits.heldout, name, options, role))
    except ValueError as exc:
        raise DataError(str(exc)) from None


def _load(path: str, cfg: DataConfig, stage: str) -> list[dict]:
    rows = load_rows(path, cfg.prompt_column, None, cfg.split)  # prompts checked (strings or conversations)
    if stage == "kto" and all("chosen" in r and "rejected" in r and "completion" not in r for r in rows):
        rows = unpair(rows)
    for i, row in enumerate(rows):
        for column in STAGE_COLUMNS[stage]:
            if column not in row or row[column] is None:
                available = ", ".join(sorted(row)) or "none"
                raise DataError(f"{path}: row {i} has no column '{column}' (available: {available}); stage '{stage}' reads {STAGE_FORMATS[stage]}")
        for column in ("completion", "chosen", "rejected"):
            if column in STAGE_COLUMNS[stage]:
                _check_completion(path, i, column, row[column], row["prompt"])
        if stage == "kto":
            row["label"] = _label(path, i, row["label"])
        if cfg.answer_column and cfg.answer_column in row and row[cfg.answer_column] is not None:
            row["answer"] = str(row.pop(cfg.answer_column))
    return rows


def unpair(rows: list[dict]) -> list[dict]:
    """A preference dataset as KTO rows: each pair becomes a desirable and an undesirable row (TRL's ``unpair_preference_dataset``)."""
    out = []
    for row in rows:
        rest = {k: v for k, v in row.items() if k not in ("chosen", "rejected")}
        out.append({**rest, "completion": row["chosen"], "label": True})
        out.append({**rest, "completion": row["rejected"], "label": False})
    return out


def _check_completion(path: str, i: int, column: str, value: Any, prompt: Any) -> None:
    if is_conversation(value):
        problem = message_problem(value)
        if problem is not None:
            raise DataError(f"{path}: row {i}, column '{column}': the conversation {problem}")
        if is_conversation(prompt) and prompt[-1]["role"] == "assistant":
            raise DataError(f"{path}: row {i}: the prompt ends with an assistant message, so column '{column}' must be the text that continues it, not a message list")
    elif not isinstance(value, str) or not value:
        raise DataError(f"{path}: row {i}, column '{column}' must be a non-empty string or a list of {{role, content}} messages")


def _label(path: str, i: int, value: Any) -> bool:
    """A KTO label: a bool, or 0 / 1 and "true" / "false" as CSV files write them."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("true", "false", "1", "0"):
        return value.strip().lower() in ("true", "1")
    raise DataError(f"{path}: row {i}, column 'label' is {value!r}; KTO labels are true (desirable) or false (undesirable)")


def split_by_prompt(rows: list[dict], heldout_fraction: float, seed: int, source: Optional[str] = None) -> TaskSplits:
    """Seeded split of whole prompts: ``round(fraction * prompts)`` of them held out (at least 1 when the fraction is positive).

    One INFO line counts rows and prompts of each side; ``source`` (the file) only names it there.
    """
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(prompt_key(row["prompt"]), []).append(row)
    keys = list(groups)
    random.Random(seed).shuffle(keys)
    n = round(heldout_fraction * len(keys))
    n = max(n, 1) if heldout_fraction > 0 else 0
    if n >= len(keys):
        raise DataError(f"only {len(keys)} distinct prompts: too few to hold out {heldout_fraction:.0%} and still train; lower data.heldout_fraction or add rows")
    heldout = [r for k in keys[:n] for r in groups[k]]
    logger.info("data: %d rows of %d prompts%s; %d prompts (%d rows) held out for evaluation (data.heldout_fraction=%g), "
                "%d prompts (%d rows) for training", len(rows), len(keys), f" from {source}" if source else "", n,
                len(heldout), heldout_fraction, len(keys) - n, len(rows) - len(heldout))
    return TaskSplits(train=[r for k in keys[n:] for r in groups[k]], heldout=heldout)


def encode(
    tokenizer: Any, rows: list[dict], stage: str, *, system_prompt: Optional[str], eos_id: int,
    max_prompt_tokens: int, max_completion_tokens: int,
) -> list[Example]:
    """Tokenized :class:`Example` s of ``rows``: prompts through the chat template, completions as described above.

    Prompts keep their last ``max_prompt_tokens`` tokens and completions their first
    ``max_completion_tokens`` (TRL's truncation sides). Token ids as the sampler's: no special
    tokens added by the tokenizer.
    """
    out = []
    for row in rows:
        text = render_prompt(tokenizer, row["prompt"], system_prompt)
        prompt_ids = _ids(tokenizer, text)[-max_prompt_tokens:]
        columns = STAGE_COLUMNS[stage][:2] if stage == "dpo" else ("completion",)
        encoded = [_completion_ids(tokenizer, row, c, text, system_prompt, eos_id) for c in columns]
        completions = [ids[:max_completion_tokens] for ids, _ in encoded]
        masks = [m[:max_completion_tokens] if m is not None else None for _, m in encoded]
        out.append(Example(prompt_ids, completions, row.get("label") if stage == "kto" else None, row, prompt_key(row["prompt"]),
                           masks if any(m is not None for m in masks) else []))
    return out


def _ids(tokenizer: Any, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def _completion_ids(
    tokenizer: Any, row: dict, column: str, prompt_text: str, system_prompt: Optional[str], eos_id: int,
) -> tuple[list[int], Optional[list[int]]]:
    """(token ids, loss mask or None) of one completion column (see :func:`_conversation_ids` for message lists)."""
    value = row[column]
    if not is_conversation(value):
        return _ids(tokenizer, value) + [eos_id], None
    if any(m["role"] != "assistant" for m in value):
        return _conversation_ids(tokenizer, row, column, prompt_text, system_prompt, eos_id)
    prompt = row["prompt"] if is_conversation(row["prompt"]) else [{"role": "user", "content": row["prompt"]}]
    if system_prompt is not None and not any(m["role"] == "system" for m in prompt):
        prompt = [{"role": "system", "content": system_prompt}, *prompt]  # as render_prompt puts it
    full = tokenizer.apply_chat_template(prompt + value, tokenize=False)
    if not full.startswith(prompt_text):
        raise DataError(
            f"column '{column}': the chat template renders the prompt differently inside the whole conversation, "
            "so the completion cannot be cut from it; give the completion as a string"
        )
    return _ids(tokenizer, full[len(prompt_text):]), None


def _conversation_ids(
    tokenizer: Any, row: dict, column: str, prompt_text: str, system_prompt: Optional[str], eos_id: int,
) -> tuple[list[int], list[int]]:
    """A multi-turn completion (assistant turns and user / tool messages): ids, and 1 on assistant content only.

    The conversation is rendered one message at a time; each message's text is what its rendering
    adds. An assistant message's header (the template's generation prompt) and whatever follows its
    end-of-turn token are masked, as are user and tool messages, so the loss covers exactly the
    tokens the policy writes in a multi-turn episode (TRL's ``assistant_only_loss``; ActiveVLN's
    imitation stage, arXiv 2509.12618 §IV: the loss on action tokens only). An assistant message
    with ``"weight": 0`` is context, not a target (Axolotl's per-message ``weight``).
    """
    prompt = row["prompt"] if is_conversation(row["prompt"]) else [{"role": "user", "content": row["prompt"]}]
    if system_prompt is not None and not any(m["role"] == "system" for m in prompt):
        prompt = [{"role": "system", "content": system_prompt}, *prompt]
    ids, mask, done = [], [], prompt_text
    for k, message in enumerate(row[column]):
        history = prompt + row[column][:k]
        text = tokenizer.apply_chat_template(history + [message], tokenize=False)
        if message["role"] == "assistant":
            header = tokenizer.apply_chat_template(history, tokenize=False, add_generation_prompt=True) if k else prompt_text
            pieces = [(header[len(done):], 0), (text[len(header):], 1 if message.get("weight", 1) else 0)]
        else:
            pieces = [(text[len(done):], 0)]
        if not text.startswith(done) or (message["role"] == "assistant" and not (header.startswith(done) and text.startswith(header))):
            raise DataError(f"column '{column}': the chat template renders earlier messages differently once message {k} follows, "
                            "so the conversation cannot be cut into turns; give the completion as a string")
        for piece, trained in pieces:
            piece_ids = _ids(tokenizer, piece) if piece else []
            if trained and eos_id in piece_ids:  # the turn ends at its end-of-turn token; the template's newline is not written
                end = piece_ids.index(eos_id) + 1
                ids += piece_ids[:end]
                mask += [1] * end
                piece_ids, trained = piece_ids[end:], 0
            ids += piece_ids
            mask += [trained] * len(piece_ids)
        done = text
    return ids, mask
