"""Load a :class:`Config` from YAML, presets and ``--set a.b=value`` overrides, with validation.

Every user mistake becomes one :class:`ConfigError` line naming the field and what to do:
unknown keys (with a suggestion), wrong types, values out of range, unknown registry names.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import types
import typing
from importlib import resources
from pathlib import Path
from typing import Any, Union

import yaml

from grpokit.config.schema import Config


class ConfigError(ValueError):
    """A user configuration mistake; the message names the field."""


class _Loader(yaml.SafeLoader):
    """YAML with YAML 1.2's numbers: ``1e-4`` is a float, as in JSON and every ML config, not PyYAML's string.

    Typed fields coerce such strings anyway; free-form option mappings (``algorithm.loss_options``
    and the like) would otherwise hand the method a string. Quote a value to keep it a string.
    """


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def load_yaml(text: str) -> Any:
    """``yaml.safe_load`` with YAML 1.2 exponent floats (see :class:`_Loader`)."""
    return yaml.load(text, Loader=_Loader)


def preset_names() -> list[str]:
    """Names of the preset YAML files shipped in ``grpokit/presets``."""
    folder = resources.files("grpokit") / "presets"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml"))


def read_preset(name: str, _seen: tuple = ()) -> dict:
    """The raw dict of preset ``name``, with the preset it builds on (its ``preset:`` key) merged under it."""
    if name not in preset_names():
        raise ConfigError(f"unknown preset '{name}'; choose one of: {', '.join(preset_names())}")
    if name in _seen:
        raise ConfigError(f"presets build on each other in a cycle: {' -> '.join(_seen + (name,))}")
    text = (resources.files("grpokit") / "presets" / f"{name}.yaml").read_text()
    data = load_yaml(text) or {}
    base = data.pop("preset", None)
    if not base:
        return data
    merged = merge(read_preset(base, _seen + (name,)), data, whole_options=True)
    if "description" not in data:  # the base's description describes the base, not this preset
        merged["description"] = f"from preset {base}"
    return merged


def read_yaml(path: str | Path) -> dict:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file '{path}' does not exist")
    try:
        data = load_yaml(p.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file '{path}' is not valid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file '{path}' must hold a mapping of sections, got {type(data).__name__}")
    return data


def merge(base: dict, override: dict, whole_options: bool = False, components: bool = True) -> dict:
    """Recursive dict merge; ``override`` wins, lists are replaced whole.

    A component's options belong to the component: where ``override`` changes a name away from
    ``base``'s (``name`` with its ``options``, e.g. ``environment.name``, ``reward_combiner.name``;
    any ``X`` with its ``X_options``, e.g. ``algorithm.loss``, ``data.task``, ``rollout.backend``),
    ``base``'s options for the old component are dropped, not deep-merged into the new one's
    (:func:`_component_changes`). With ``whole_options`` (presets building on presets), option
    bags (``*_options``, ``options``, ``kwargs``) are replaced whole: they belong to the variant the
    overriding preset chose. ``components=False``: no component rule (the ``--set`` assignments
    among themselves are one layer, so their order does not matter).
    """
    out = _component_changes(dict(base), override) if components else dict(base)
    for key, value in override.items():
        is_bag = key == "options" or key == "kwargs" or key.endswith("_options")
        if isinstance(value, dict) and isinstance(out.get(key), dict) and not (whole_options and is_bag):
            out[key] = merge(out[key], value, whole_options, components)
        else:
            out[key] = value
    return out


def _component_changes(out: dict, override: dict) -> dict:
    """``out`` (a copy of the base) less the options of each component ``override`` renames.

    ``name`` owns ``options`` and ``X`` owns ``X_options``: when ``override[X]`` differs from
    ``out[X]``, ``out``'s bag goes (``override``'s own bag, if any, is then taken whole). The
    ``rewards`` list, each with its ``kwargs``, is replaced whole as every list is. And the rows
    of a built-in task go with the environment they were made for: when ``environment.name``
    changes and ``override`` names no data source, ``out``'s ``data.task`` becomes null (an
    environment-only run, :mod:`grpokit.envs.own_episodes`) and its ``task_options`` go.
    """
    for key, value in override.items():
        if isinstance(value, dict) or key not in out or out[key] == value:
            continue
        bag = "options" if key == "name" else f"{key}_options"
        out.pop(bag, None)
    env, data = override.get("environment"), out.get("data")
    renamed = isinstance(env, dict) and "name" in env and isinstance(out.get("environment"), dict) \
        and out["environment"].get("name") not in (None, env["name"])
    given = override.get("data") if isinstance(override.get("data"), dict) else {}
    if renamed and isinstance(data, dict) and data.get("task") and not data.get("path") and not ({"task", "path"} & set(given)):
        out["data"] = {k: v for k, v in data.items() if k != "task_options"} | {"task": None}
    return out


def apply_set(data: dict, assignment: str, components: bool = True) -> dict:
    """Apply one ``a.b.c=value`` override (value parsed as YAML) to a raw config dict (``components``: see :func:`merge`)."""
    if "=" not in assignment:
        raise ConfigError(f"--set '{assignment}' must look like section.field=value")
    dotted, raw = assignment.split("=", 1)
    keys = dotted.strip().split(".")
    value = load_yaml(raw) if raw.strip() else None
    nested: Any = value
    for key in reversed(keys):
        nested = {key: nested}
    return merge(data, nested, components=components)


def load_config(path: str | None = None, preset: str | None = None, overrides: list[str] = ()) -> Config:
    """Build a validated Config: defaults <- preset <- YAML file <- ``--set`` overrides."""
    return from_dict(Config, raw_config(path, preset, overrides), "")


def raw_config(path: str | None = None, preset: str | None = None, overrides: list[str] = ()) -> dict:
    """The merged, unvalidated config dict of preset <- YAML file <- ``--set`` overrides (no torch import)."""
    data: dict = {}
    if preset:
        data = merge(data, read_preset(preset))
    if path:
        file_data = read_yaml(path)
        bases = [preset] if preset else []
        if "preset" in file_data:
            bases.insert(0, file_data.pop("preset"))
            data = merge(read_preset(bases[0]), data)
        if bases and "description" not in file_data:  # a preset's description would describe the preset, not this file's run
            file_data["description"] = f"from preset {' and '.join(bases)}"
        data = merge(data, file_data)
    sets: dict = {}
    for assignment in overrides:  # one layer: `--set environment.options=... --set environment.name=x` keeps both
        sets = apply_set(sets, assignment, components=False)
    data = merge(data, sets)
    environment, source = data.get("environment") or {}, data.get("data") or {}
    if isinstance(environment, dict) and environment.get("name") and not ({"task", "path"} & set(source)):
        # an environment run that names no data source: the environment makes its own episodes (grpokit.envs.own_episodes)
        data["data"] = {**source, "task": None}
    return data


def to_dict(cfg: Any) -> dict:
    return dataclasses.asdict(cfg)


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp))


_EXPONENT_FLOAT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def _coerce(value: Any, tp: Any, where: str, meta: dict) -> Any:
    origin = typing.get_origin(tp)
    if origin is Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None:
            return None
        return _coerce(value, args[0], where, meta)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"{where} must be a mapping of fields, got {value!r}")
        return from_dict(tp, value, f"{where}.")
    if tp is list:
        if not isinstance(value, list):
            raise ConfigError(f"{where} must be a list, got {value!r}")
        item_type = meta.get("item_type")
        if item_type is not None:
            return [_coerce(v, item_type, f"{where}[{i}]", {}) for i, v in enumerate(value)]
        return value
    if tp is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where} must be a mapping, got {value!r}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where} must be true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where} must be an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, str) and _EXPONENT_FLOAT.fullmatch(value.strip()):
            value = float(value)  # YAML 1.1 reads 1e-6 (no dot) as a string; it is the number the user wrote
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where} must be a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where} must be a string, got {value!r}")
        return value
    return value


def _check(value: Any, where: str, meta: dict) -> None:
    if value is None:
        return
    bounds = {"ge": (lambda v, b: v >= b, ">="), "gt": (lambda v, b: v > b, ">"),
              "le": (lambda v, b: v <= b, "<="), "lt": (lambda v, b: v < b, "<")}
    for key, (ok, sym) in bounds.items():
        if key in meta and not ok(value, meta[key]):
            raise ConfigError(f"{where} = {value!r} is out of range: it must be {sym} {meta[key]}")
    if "choices" in meta:  # a list field's choices apply to each of its items
        for item in value if isinstance(value, list) else [value]:
            if item not in meta["choices"]:
                shown = f"{where} item {item!r}" if isinstance(value, list) else f"{where} = {item!r}"
                raise ConfigError(f"{shown} is not allowed; choose one of: {', '.join(map(str, meta['choices']))}")
    if "registry" in meta and value not in meta.get("also", ()):
        from grpokit.registries import get_registry

        registry = get_registry(meta["registry"])
        if value not in registry:
            names = list(meta.get("also", ())) + registry.names()
            raise ConfigError(f"{where} = {value!r} is not a registered {meta['registry']}; choose one of: {', '.join(names)}")


def from_dict(cls: type, data: dict, prefix: str) -> Any:
    """Build dataclass ``cls`` from ``data``; unknown keys and bad values raise ConfigError."""
    if cls is Config:
        load_config_plugins(data.get("plugins"))  # before any registry name is checked
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        where = f"{prefix}{key}"
        if key not in fields:
            close = difflib.get_close_matches(str(key), list(fields), n=1)
            hint = f"; did you mean '{prefix}{close[0]}'?" if close else f"; valid keys: {', '.join(fields)}"
            raise ConfigError(f"unknown config key '{where}'{hint}")
        meta = dict(fields[key].metadata)
        if "normalize" in meta:  # a field that takes several spellings of one value (TRL's report_to)
            try:
                value = meta["normalize"](value)
            except ValueError as exc:
                raise ConfigError(f"{where}: {exc}") from None
        coerced = _coerce(value, hints[key], where, meta)
        _check(coerced, where, meta)
        kwargs[key] = coerced
    obj = cls(**kwargs)
    # Defaults are checked too: a registry default must exist.
    for name, f in fields.items():
        if name not in kwargs:
            _check(getattr(obj, name), f"{prefix}{name}", dict(f.metadata)) if "registry" in f.metadata else None
    return obj


def load_config_plugins(plugins: Any) -> None:
    """Import a config's ``plugins`` (module names or ``.py`` paths), after the built-in and entry-point plugins.

    The built-ins load first, so a plugin that registers a name already taken is refused there, naming it.
    """
    if plugins is None:
        return
    if not isinstance(plugins, list) or not all(isinstance(p, str) and p.strip() for p in plugins):
        raise ConfigError(f"plugins must be a list of module names or path/to/file.py, got {plugins!r}")
    from grpokit.builtins import load_plugins
    from grpokit.plugins import PluginError, load_module

    load_plugins()
    for i, source in enumerate(plugins):
        try:
            load_module(source, f"plugins[{i}] {source!r}")
        except PluginError as exc:
            raise ConfigError(str(exc)) from None
        except Exception as exc:  # a module that imports but fails while registering (e.g. a name already taken)
            reason = (str(exc).splitlines() or [""])[0]
            raise ConfigError(f"plugins[{i}] {source!r}: importing it failed: {type(exc).__name__}: {reason}") from exc


class _Dumper(yaml.SafeDumper):
    """YAML of a config that may hold Python objects (an environment class given from Python): each as its 'module:Name'."""


for _kind in (type, types.FunctionType):  # classes (any metaclass) and functions
    _Dumper.add_multi_representer(_kind, lambda dumper, obj: dumper.represent_str(f"{obj.__module__}:{obj.__qualname__}"))


def dump_yaml(cfg: Any) -> str:
    return yaml.dump(to_dict(cfg), Dumper=_Dumper, sort_keys=False)


def field_docs(cls: type = Config, prefix: str = "") -> list[tuple[str, str, Any]]:
    """(dotted name, doc, default) for every field, recursively; used by docs and `grpokit list`."""
    rows = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            rows.extend(field_docs(tp, f"{prefix}{f.name}."))
        else:
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            rows.append((f"{prefix}{f.name}", f.metadata.get("doc", ""), default))
    return rows
