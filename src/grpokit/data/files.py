"""Load prompt/answer rows from local data files and split them into train and held-out sets.

Supported: ``.jsonl``, ``.json`` (a list of objects), ``.csv``, ``.parquet``, and a directory
written by ``datasets.Dataset.save_to_disk`` or ``DatasetDict.save_to_disk``.
"""

from __future__ import annotations

import csv
import json
import logging
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpokit.data.chat import is_conversation, message_problem
from grpokit.data.tasks import TaskSplits

if TYPE_CHECKING:
    from grpokit.config.schema import DataConfig

logger = logging.getLogger(__name__)

SUPPORTED_EXTENSIONS = (".jsonl", ".json", ".csv", ".parquet")


class DataError(ValueError):
    """A data file cannot be used as given; the message names the file or field and the fix."""


def _read_jsonl(path: Path) -> list[dict]:
    rows = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"{path}: line {lineno} is not valid JSON ({exc.msg})") from None
            if not isinstance(row, dict):
                kind = type(row).__name__
                raise DataError(f"{path}: line {lineno} must be a JSON object, got {kind}")
            rows.append(row)
    return rows


def _read_json(path: Path) -> list[dict]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise DataError(
            f"{path}: a .json data file must hold a list of objects; "
            "for one object per line use .jsonl"
        )
    return data


def _read_csv(path: Path) -> list[dict]:
    # The stdlib reader keeps every cell as the exact text in the file (no float coercion).
    with path.open(encoding="utf-8", newline="") as f:
        return [dict(row) for row in csv.DictReader(f)]


def _read_parquet(path: Path) -> list[dict]:
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


def _read_saved_dataset(path: Path, split: str | None) -> list[dict]:
    import datasets

    try:
        loaded = datasets.load_from_disk(str(path))
    except FileNotFoundError:
        raise DataError(
            f"{path}: directory is not a dataset saved with datasets' save_to_disk"
        ) from None
    if isinstance(loaded, datasets.DatasetDict):
        name = split or "train"
        if name not in loaded:
            raise DataError(
                f"{path}: no split '{name}' (available: {', '.join(loaded)}); set data.split"
            )
        loaded = loaded[name]
    return loaded.to_list()


def _read_any(path: Path, split: str | None) -> list[dict]:
    if not path.exists():
        raise DataError(f"data file not found: {path}")
    if path.is_dir():
        return _read_saved_dataset(path, split)
    suffix = path.suffix.lower()
    readers = {
        ".jsonl": _read_jsonl,
        ".json": _read_json,
        ".csv": _read_csv,
        ".parquet": _read_parquet,
    }
    if suffix not in readers:
        raise DataError(
            f"{path}: unsupported extension '{suffix}'; use one of "
            f"{', '.join(SUPPORTED_EXTENSIONS)} or a save_to_disk directory"
        )
    return readers[suffix](path)


def _missing_column(path: Path, row: dict, column: str, field: str, index: int) -> DataError:
    available = ", ".join(map(str, row)) or "none"
    return DataError(
        f"{path}: row {index} has no column '{column}' (available: {available}); "
        f"set {field} to the right column"
    )


def _checked_prompt(path: Path, prompt: Any, column: str, index: int) -> Any:
    """``prompt`` when it is a non-empty string or a valid message list; else a one-line DataError."""
    if is_conversation(prompt):
        problem = message_problem(prompt)
        if problem is not None:
            raise DataError(f"{path}: row {index}, column '{column}': the conversation {problem}")
        return prompt
    if not isinstance(prompt, str) or not prompt.strip():
        raise DataError(
            f"{path}: empty prompt in row {index} (column '{column}'); "
            "fill it in (a string or a list of {role, content} messages) or remove the row"
        )
    return prompt


def prompt_key(prompt: Any) -> str:
    """A hashable identity of a prompt: the string itself, or a conversation as canonical JSON."""
    return json.dumps(prompt, sort_keys=True) if is_conversation(prompt) else prompt


def load_rows(
    path: str,
    prompt_column: str = "prompt",
    answer_column: str | None = "answer",
    split: str | None = None,
) -> list[dict]:
    """Rows of a local data file as dicts with "prompt", "answer" (str) and all other columns.

    A prompt is a string or, in TRL's conversational format, a list of ``{"role", "content"}``
    messages (roles system, user, assistant, tool; see :mod:`grpokit.data.chat`); every row
    uses the same format. A malformed message list is a DataError naming the row and message.

    ``prompt_column``/``answer_column`` name the source columns (config fields
    ``data.prompt_column``/``data.answer_column``); they are renamed to "prompt"/"answer".
    ``answer_column=None`` loads prompts only. ``split`` selects a split of a saved
    ``DatasetDict`` (default "train") and is ignored for single files. Row indices in errors
    count from 0.
    """
    file = Path(path)
    return normalise_rows(_read_any(file, split), file, prompt_column, answer_column)


def normalise_rows(
    raw: list[dict], file: Any, prompt_column: str = "prompt", answer_column: str | None = "answer"
) -> list[dict]:
    """:func:`load_rows` on rows already in memory (a ``datasets.Dataset``'s ``to_list()``, a list of dicts).

    ``file`` only names the source in errors (a path, or e.g. ``"train_dataset"``).
    """
    if not raw:
        raise DataError(f"{file}: no rows found")
    rows: list[dict] = []
    for i, source in enumerate(raw):
        if prompt_column not in source:
            raise _missing_column(file, source, prompt_column, "data.prompt_column", i)
        if answer_column is not None and answer_column not in source:
            raise _missing_column(file, source, answer_column, "data.answer_column", i)
        prompt = _checked_prompt(file, source[prompt_column], prompt_column, i)
        if rows and is_conversation(prompt) != is_conversation(rows[0]["prompt"]):
            first = "a message list" if is_conversation(rows[0]["prompt"]) else "a string"
            raise DataError(
                f"{file}: row {i} mixes prompt formats (column '{prompt_column}'; row 0 is {first}); "
                "use one format for every row"
            )
        row: dict[str, Any] = {
            k: v for k, v in source.items() if k not in (prompt_column, answer_column)
        }
        row["prompt"] = prompt
        if answer_column is not None:
            answer = source[answer_column]
            if answer is None:
                raise DataError(
                    f"{file}: missing answer in row {i} (column '{answer_column}'); "
                    "fill it in, remove the row, or set data.answer_column: null"
                )
            row["answer"] = str(answer)
        rows.append(row)
    return rows


def in_memory_rows(data: Any, name: str, prompt_column: str = "prompt", answer_column: str | None = "answer") -> list[dict]:
    """:func:`normalise_rows` of a ``datasets.Dataset`` or a list of dicts (``name`` names it in errors)."""
    if hasattr(data, "keys") and hasattr(data, "column_names") and not hasattr(data, "to_list"):  # a DatasetDict
        raise DataError(f"{name} is a DatasetDict with splits {list(data.keys())}: pass one split, e.g. {name}['train']")
    if hasattr(data, "to_list"):
        raw = data.to_list()
    elif isinstance(data, (list, tuple)) and all(isinstance(r, dict) for r in data):
        raw = list(data)
    else:
        raise DataError(f"{name} is a {type(data).__name__}: give a datasets.Dataset or a list of dicts with a '{prompt_column}' key")
    return normalise_rows(raw, name, prompt_column, answer_column)


def visual_key(row: dict) -> str:
    """The identity of a row's images / video: file paths as written, in-memory images by their bytes."""
    import hashlib

    items = list(row.get("images") or []) + list(row.get("video") or [])
    if not items:
        return ""
    h = hashlib.sha1()
    for item in items:
        h.update(item.tobytes() if hasattr(item, "tobytes") else str(item).encode())
    return "\x00" + h.hexdigest()


def split_rows(rows: list[dict], heldout_fraction: float, seed: int, source: str | None = None) -> TaskSplits:
    """Seeded shuffle of ``rows`` into disjoint train and held-out splits, counted in one INFO line.

    Rows with a repeated prompt are dropped (first one kept) so no prompt lands in both
    splits; a row's ``images`` / ``video`` column (file paths or PIL images) is part of its
    prompt, so the same question about other images is another prompt. The held-out size is
    ``round(heldout_fraction * n)`` of the n distinct prompts, at least 1 when the fraction is
    positive. ``source`` (the file the rows came from) only names it in the log line::

        data: 40 rows from d.jsonl; 7 duplicate prompts dropped (first kept); 3 of the 33 distinct
        held out for evaluation (data.heldout_fraction=0.1), 30 for training
    """
    if not 0.0 <= heldout_fraction < 1.0:
        raise DataError(
            f"heldout_fraction must be in [0, 1), got {heldout_fraction}; "
            "set data.heldout_fraction"
        )
    unique: dict[str, dict] = {}
    for row in rows:
        unique.setdefault(prompt_key(row["prompt"]) + visual_key(row), row)
    shuffled = list(unique.values())
    random.Random(seed).shuffle(shuffled)
    n_heldout = round(heldout_fraction * len(shuffled))
    if heldout_fraction > 0:
        n_heldout = max(n_heldout, 1)
    if n_heldout >= len(shuffled):
        raise DataError(
            f"only {len(shuffled)} distinct prompts: too few to hold out "
            f"{heldout_fraction:.0%} and still train; lower data.heldout_fraction or add rows"
        )
    logger.info(
        "data: %d rows%s; %d duplicate prompts dropped (first kept); %d of the %d distinct held out "
        "for evaluation (data.heldout_fraction=%g), %d for training",
        len(rows), f" from {source}" if source else "", len(rows) - len(unique), n_heldout,
        len(shuffled), heldout_fraction, len(shuffled) - n_heldout,
    )
    return TaskSplits(train=shuffled[n_heldout:], heldout=shuffled[:n_heldout])


def file_splits(cfg: DataConfig) -> TaskSplits:
    """Train and held-out rows of ``data.path``: ``data.heldout_path`` as given, else :func:`split_rows`.

    Either way one INFO line counts the rows; a held-out file whose prompts also occur in the
    training file is a WARNING naming how many (their accuracy is not held-out accuracy).
    """
    rows = load_rows(cfg.path, cfg.prompt_column, cfg.answer_column, cfg.split)
    if not cfg.heldout_path:
        return split_rows(rows, cfg.heldout_fraction, cfg.seed, source=cfg.path)
    heldout = load_rows(cfg.heldout_path, cfg.prompt_column, cfg.answer_column, cfg.split)
    logger.info(
        "data: %d training rows from %s; %d held out for evaluation from %s (data.heldout_path; "
        "data.heldout_fraction unused)", len(rows), cfg.path, len(heldout), cfg.heldout_path,
    )
    train_keys = {prompt_key(r["prompt"]) + visual_key(r) for r in rows}
    shared = sum(prompt_key(r["prompt"]) + visual_key(r) in train_keys for r in heldout)
    if shared:
        logger.warning(
            "data: %d of the %d held-out rows in %s have a prompt that is also in %s (data.path); "
            "their accuracy is not held-out accuracy: remove them from one file", shared, len(heldout),
            cfg.heldout_path, cfg.path,
        )
    return TaskSplits(train=rows, heldout=heldout)
