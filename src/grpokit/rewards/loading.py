"""Resolve a config reward spec: a built-in name, "module:function" or "file.py:function"."""

from __future__ import annotations

import inspect
from typing import Any, Callable, Mapping, Optional, Sequence

from grpokit.plugins import PluginError, load_module
from grpokit.rewards.builtin import REWARDS


class RewardLoadError(PluginError):
    """A reward spec in the config cannot be resolved; the message says what to change."""


def is_builtin(spec: str) -> bool:
    """True when ``spec`` names a built-in reward: those read plain texts (``NamedReward.text_only``)."""
    return spec in REWARDS


def resolve_reward(spec: str) -> Callable:
    """The reward callable named by ``spec``.

    Accepted forms: a built-in name (see ``REWARDS.names()``), ``"package.module:function"``,
    or ``"path/to/file.py:function"`` (path relative to the working directory or absolute).
    A user function is called as TRL calls a reward function (see :mod:`grpokit.rewards.scoring`),
    so one written for TRL's GRPOTrainer runs unchanged.
    """
    if spec in REWARDS:
        return REWARDS.get(spec)
    if ":" not in spec:
        raise RewardLoadError(
            f"unknown reward '{spec}'; use a built-in ({', '.join(REWARDS.names())}), "
            "'package.module:function', or 'path/to/file.py:function'"
        )
    source, _, attr = spec.rpartition(":")
    if not source or not attr:
        raise RewardLoadError(
            f"reward '{spec}': expected 'package.module:function' or 'path/to/file.py:function'"
        )
    try:
        module = load_module(source, f"reward '{spec}'")
    except PluginError as exc:
        raise RewardLoadError(str(exc)) from None
    if not hasattr(module, attr):
        public = sorted(
            n for n, v in vars(module).items() if callable(v) and not n.startswith("_")
        )
        raise RewardLoadError(
            f"reward '{spec}': {source} has no function '{attr}' "
            f"(callables there: {', '.join(public) or 'none'})"
        )
    fn = getattr(module, attr)
    if not callable(fn):
        raise RewardLoadError(
            f"reward '{spec}': '{attr}' in {source} is a {type(fn).__name__}, not a function"
        )
    return fn


# Parameters every reward receives from the trainer (the batch), never bound from the config.
DATA_PARAMS = ("prompts", "completions", "completion_ids")


def _option_names(fn: Callable) -> tuple[Optional[set], bool]:
    """(named parameters of ``fn`` or None when it has no signature, whether it has a ``**kwargs``)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a callable without a signature (a C function): nothing to check against
        return None, True
    named = {n for n, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return named, any(p.kind is p.VAR_KEYWORD for p in params.values())


def check_reward_options(spec: str, fn: Callable, options: Mapping[str, Any], where: str) -> None:
    """Refuse (one line) a key of ``options`` (a reward's config ``kwargs``) that the reward does not read.

    A reward is called TRL's way, ``fn(prompts, completions, **columns)`` with every data column,
    so its ``**kwargs`` stands for the columns, not for options: an option must be a named
    parameter of ``fn`` (its signature is the declaration), or of the callable that a built-in
    forwards its other options to (its registration's ``forwards_options_to``, e.g. win_rate's
    ``prefer`` judge). A built-in's ``**kwargs`` only takes columns, so an unknown key there is a
    typo. A user function with ``**kwargs`` may read options from it: its keys are passed as given.
    """
    named, catch_all = _option_names(fn)
    if named is None or (catch_all and not is_builtin(spec)):
        return
    bound_data = sorted(set(options) & set(DATA_PARAMS))
    if bound_data:
        raise RewardLoadError(f"{where} {bound_data}: the trainer passes these to reward '{spec}' from the batch; remove them")
    valid = named - set(DATA_PARAMS)
    forwards = REWARDS.spec(spec).forwards_options_to if is_builtin(spec) else None
    for option, builtins in (forwards or {}).items():
        target = options.get(option)
        if target is None:
            continue
        if isinstance(target, str) and target not in builtins and ":" not in target:
            raise RewardLoadError(f"{where}.{option} = {target!r} is not a built-in ({', '.join(sorted(builtins)) or 'none'}) "
                                  "nor 'module:function' / 'file.py:function'")
        carried, carried_all = _option_names(target if callable(target) else builtins.get(target) or resolve_reward(target))
        if carried is None or carried_all:
            return
        valid |= carried - set(DATA_PARAMS)
    unknown = sorted(set(options) - valid)
    if unknown:
        raise RewardLoadError(f"{where} {unknown} {'is' if len(unknown) == 1 else 'are'} not an option of reward '{spec}'; "
                              f"valid keys: {', '.join(sorted(valid)) or 'none'}")


def refuse_unknown_options(reward: str, n: int, extra: dict[str, Any], options: Sequence[str]) -> None:
    """Raise (one line) for a keyword of ``extra`` that is not a data column: a column is one value per completion.

    A built-in's ``**columns`` takes the batch's columns (``answer``, ``task``, …: sequences of
    length ``n``); anything else there is a mistyped option.
    """
    def is_column(v: Any) -> bool:
        return hasattr(v, "__len__") and not isinstance(v, (str, bytes, dict)) and len(v) == n

    bad = sorted(k for k, v in extra.items() if not is_column(v))
    if bad:
        raise ValueError(f"reward '{reward}': {bad} {'is' if len(bad) == 1 else 'are'} not an option; "
                         f"options: {', '.join(options)}")
