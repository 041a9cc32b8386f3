"""Prompt data: synthetic tasks, local data files, answer extraction, prompt rendering."""

from grpokit.data.answers import extract_answer_number, numbers_equal
from grpokit.data.chat import render_prompt
from grpokit.data.files import DataError, file_splits, load_rows, split_rows
from grpokit.data.tasks import TASKS, TaskSplits

__all__ = [
    "TASKS",
    "DataError",
    "TaskSplits",
    "extract_answer_number",
    "file_splits",
    "load_rows",
    "numbers_equal",
    "render_prompt",
    "split_rows",
]
