"""Name -> callable registries, one per pipeline axis, with each entry's declared contract.

Every variant (advantage, loss, aggregation, KL estimator, reward, task, …) is a small
function registered by name. Configs select variants by these names; the trainer never
branches on a name. Duplicate registration is an error, never a silent overwrite.
The first lookup on any registry (``get``, ``spec``, ``names``, ``in``, …; never ``register``)
imports every plugin module once (:func:`grpokit.builtins.load_plugins`: the built-ins, then
third parties), so no registry module imports its own plugins.

A registration also declares what the trainer must know about the function, instead of
attributes patched on afterwards:

    @POLICY_LOSSES.register("disco", inputs=("group_ids",), optional=("constraint_kl",), groupwise=True)

``inputs`` names the batch inputs the function needs (see ``grpokit.trainer.inputs`` for who
produces each: a run without a producer for one is refused at load, and the function never
sees None there); ``optional`` those it reads when present (the trainer produces them when it
can; e.g. a per-update statistic that does not exist before the first update); the other keywords are the axis's declared properties (``Registry(axis,
properties={...})`` lists them with their defaults; an undeclared one is an error at import).
User options of a variant (``loss_options`` and the like) are checked against the function's
signature by :meth:`Registry.check_options`: an unknown key fails naming the valid ones.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Spec:
    """One registered variant: its callable, the inputs it reads and its declared properties."""

    name: str
    fn: Callable[..., Any]
    inputs: tuple[str, ...] = ()
    props: Mapping[str, Any] = field(default_factory=dict)
    optional: tuple[str, ...] = ()

    def __getattr__(self, key: str) -> Any:  # spec.groupwise, spec.make_state, …
        props = object.__getattribute__(self, "props")
        if key in props:
            return props[key]
        raise AttributeError(key)


class Registry:
    """A named collection of callables for one axis of the pipeline (e.g. ``advantage``).

    ``properties``: the properties a registration on this axis may declare, with their defaults.
    ``context``: keyword arguments the trainer itself passes to every function of the axis
    (never user options): they are not offered as valid option keys.
    """

    def __init__(
        self, axis: str, properties: Optional[Mapping[str, Any]] = None, context: Iterable[str] = (),
        option_carriers: Iterable[str] = (),
    ) -> None:
        self.axis = axis
        self.option_carriers = tuple(option_carriers)  # properties that are functions of some of the options
        self.properties = dict(properties or {})
        self.context = frozenset(context)
        self._specs: dict[str, Spec] = {}

    def register(self, name: str, *, inputs: Iterable[str] = (), optional: Iterable[str] = (), **props: Any) -> Callable[[F], F]:
        """Decorator: register ``fn`` under ``name`` with its (optional) inputs and properties; raises if the name is taken."""
        unknown = sorted(set(props) - set(self.properties))
        if unknown:
            raise TypeError(f"{self.axis} '{name}': undeclared properties {unknown}; this axis declares {sorted(self.properties)}")

        def deco(fn: F) -> F:
            if name in self._specs:
                raise ValueError(f"{self.axis} '{name}' is already registered")
            self._specs[name] = Spec(name, fn, tuple(inputs), {**self.properties, **props}, tuple(optional))
            return fn

        return deco

    def _loaded(self) -> dict[str, Spec]:
        """Every registration, after the built-in and third-party plugins loaded (once: :func:`grpokit.builtins.load_plugins`)."""
        from grpokit.builtins import load_plugins

        load_plugins()
        return self._specs

    def get(self, name: str) -> Callable[..., Any]:
        """Return the callable registered as ``name``; the error lists the valid names."""
        return self.spec(name).fn

    def spec(self, name: str) -> Spec:
        """The :class:`Spec` of ``name`` (callable, inputs, properties)."""
        specs = self._loaded()
        try:
            return specs[name]
        except KeyError:
            valid = ", ".join(sorted(specs))
            raise KeyError(f"unknown {self.axis} '{name}'; choose one of: {valid}") from None

    def option_names(self, name: str) -> list[str]:
        """The option keys ``name`` accepts: its keyword parameters, less the axis's context arguments."""
        spec = self.spec(name)
        fns = [spec.fn] + [spec.props[c] for c in self.option_carriers if callable(spec.props.get(c))]
        names = {p.name for fn in fns for p in _option_params(fn)}
        return sorted(names - self.context)

    def context_taken(self, name: str, values: Mapping[str, Any]) -> set[str]:
        """The axis's context keywords that ``name`` reads, given the run's option and context ``values``.

        Those its signature names (all of them for a ``**kwargs`` function), less those its
        registration's ``reads_if`` switches off: ``reads_if={key: (switch, on)}`` says the context
        or option ``key`` is read only while the option or context value ``switch`` (from ``values``,
        else its signature default) is one of ``on``, or satisfies ``on`` when it is a predicate such
        as :func:`is_set` (e.g. CISPO reads the clip range only with
        ``ppo_mask``; KDRL's ``kd_estimator`` only with ``kd_placement='loss'``).
        A config field whose context keyword is not taken has no effect on the run.
        """
        params = inspect.signature(self.spec(name).fn).parameters
        catch_all = any(p.kind is p.VAR_KEYWORD for p in params.values())
        taken = set(self.context) if catch_all else {k for k in self.context if k in params}
        return taken - self.switched_off(name, values)

    def switched_off(self, name: str, values: Mapping[str, Any]) -> set[str]:
        """The option or context keys of ``name`` that its ``reads_if`` switches off under ``values`` (see :meth:`context_taken`)."""
        spec = self.spec(name)
        params = inspect.signature(spec.fn).parameters
        off = set()
        for key, (switch, on) in dict(spec.props.get("reads_if") or {}).items():
            default = params[switch].default if switch in params else None
            value = values.get(switch, default)
            if not (on(value) if callable(on) else value in on):
                off.add(key)
        return off

    def check_options(self, name: str, options: Mapping[str, Any], where: str) -> None:
        """Raise ``ValueError`` (one line) when ``options`` holds a key that ``name`` does not take."""
        valid = self.option_names(name)
        unknown = sorted(set(options) - set(valid))
        if unknown:
            shown = ", ".join(valid) if valid else "none"
            raise ValueError(f"{where} {unknown} {'is' if len(unknown) == 1 else 'are'} not an option of {self.axis} '{name}'; valid keys: {shown}")

    def names(self) -> list[str]:
        return sorted(self._loaded())

    def summary(self, name: str) -> str:
        """First line of the docstring of ``name`` (for ``grpokit list``)."""
        doc = (self.spec(name).fn.__doc__ or "").strip()
        return doc.splitlines()[0] if doc else ""

    def __contains__(self, name: object) -> bool:
        return name in self._loaded()

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._loaded())


def _option_params(fn: Callable[..., Any]) -> list[inspect.Parameter]:
    """Option parameters of ``fn``: keyword-only ones of a function (its positional ones are data); all named ones of a class."""
    params = inspect.signature(fn).parameters.values()
    if inspect.isclass(fn):
        return [p for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    return [p for p in params if p.kind is p.KEYWORD_ONLY]


def call_with(fn: Callable[..., Any], *args: Any, context: Mapping[str, Any], options: Mapping[str, Any] = {}) -> Any:
    """``fn(*args, **options, **context')`` where context' keeps only the context keywords ``fn`` accepts.

    The trainer offers every context argument of an axis (e.g. an aggregation's ``num_seqs``,
    ``num_tokens``, ``max_len``); each function takes the ones it needs, so none needs a ``**_``
    catch-all that would also swallow a user's option typo.
    """
    params = inspect.signature(fn).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return fn(*args, **options, **context)
    return fn(*args, **options, **{k: v for k, v in context.items() if k in params})


def is_set(value: Any) -> bool:
    """set (not null)"""  # a ``reads_if`` predicate; its docstring is how the refusal names the condition
    return value is not None


def describe_switch(on: Any) -> str:
    """How a refusal names a ``reads_if`` condition: 'one of [..]', or the predicate's docstring."""
    return (on.__doc__ or "true").strip() if callable(on) else f"one of {list(on)}"
