"""The thin layer over ``dependencies`` 2.0.1 that every quantizer is built on.

Adds what Brevitas users miss: ``Q.let(...)`` and layer keywords with an unknown
name fail with a did-you-mean, ``Q.describe()`` / ``format_settings(Q)`` show the
resolved settings, and ``ConfigError`` names the setting a solver rejects.
The rest of groupquant imports this module, never ``dependencies``.

Quirks of dependencies 2.0.1 (each pinned by a test in tests/test_inject.py):

* Every class-body name becomes a dependency; nothing is stored on the class.
  Reading ``Q.x`` resolves ``x`` and all it needs, anew on each access. Body
  functions are raw values, not methods: our helpers live on the metaclass,
  so ``describe`` and ``format_settings`` cannot be setting names.
* A class under a name not ending in ``_class`` is instantiated, ``__init__``
  arguments injected by name; ``foo_class = C`` keeps the class. A ``@value``
  that returns a class returns it as is (Brevitas's ExtendedInjector builds it).
* ``@value`` arguments are resolved by name; one with a default is optional.
  A missing required one raises ``DependencyError``, except the *last*
  required argument: it is left out and the call fails with ``TypeError``
  (off by one in 2.0.1). An argument ``__self__`` receives the injector.
* A missing name raises ``DependencyError``, not ``AttributeError``, so
  ``hasattr(Q, "x")`` raises (use ``"x" in Q``), while an ``AttributeError``
  raised inside a solver is swallowed by ``getattr(Q, "x", default)``.
* Other exceptions raised by solvers propagate unchanged.
* Dunder names are rejected ("Magic methods are not allowed"); Python 3.13+
  puts ``__firstlineno__``/``__static_attributes__`` in every class body, so
  plain ``dependencies.Injector`` cannot be subclassed there. Our metaclass
  drops those and annotations (``bit_width: int = 8`` works). ``_x`` names are
  ordinary; ``__x`` is mangled to ``_Q__x`` (in solver arguments too).
* ``let`` builds a subclass (also of subclasses and ``let`` results), cannot
  be redefined in a body, and in 2.0.1 accepts any name silently.
* A nested Injector resolves to a subclass whose ``(this << 1).x`` reads the
  outer injector.
"""
from __future__ import annotations

import difflib
import inspect
from dataclasses import dataclass
from enum import Enum
from typing import Any, Dict, FrozenSet, Mapping, Optional

from _dependencies.operation import _OperationSpec
from _dependencies.raw import _RawSpec
from dependencies import Injector as _BaseInjector
from dependencies import this, value
from dependencies.exceptions import DependencyError

__all__ = [
    "ConfigError", "DependencyError", "Injector", "UnknownSettingError",
    "check_overrides", "describe", "extend", "format_settings",
    "known_settings", "this", "value",
]

# Class-body entries the compiler adds that carry no setting (3.13+: first two).
_DROPPED_DUNDERS = frozenset({
    "__firstlineno__", "__static_attributes__", "__annotations__",
    "__annotate__", "__annotate_func__", "__classdictcell__",
})
_RESERVED = frozenset({"describe", "format_settings"})
_PLAIN_TYPES = (bool, int, float, str, Enum, type(None))


class ConfigError(ValueError):
    """A setting holds a value the quantizer cannot use; ``setting`` names it.

    Raise it from ``@value`` solvers: it reaches the user unchanged.
    """

    def __init__(self, setting: str, problem: str):
        super().__init__(setting, problem)
        self.setting = setting
        self.problem = problem

    def __str__(self) -> str:
        return f"invalid setting {self.setting!r}: {self.problem}"


class UnknownSettingError(ConfigError):
    """An override names no setting; ``suggestion`` is the closest known name."""

    def __init__(self, setting: str, problem: str, suggestion: Optional[str] = None):
        ValueError.__init__(self, setting, problem, suggestion)
        self.setting, self.problem, self.suggestion = setting, problem, suggestion

    def __str__(self) -> str:
        return self.problem


class _InjectorType(type(_BaseInjector)):
    """Metaclass: Python 3.13 class bodies, ``__extra_settings__``, helpers."""

    def __new__(mcs, class_name, bases, namespace):
        namespace = {k: v for k, v in namespace.items() if k not in _DROPPED_DUNDERS}
        extra = namespace.pop("__extra_settings__", ())
        if isinstance(extra, str) or not all(isinstance(n, str) for n in extra):
            raise TypeError(f"{class_name}.__extra_settings__ must be a tuple of names")
        clash = sorted(_RESERVED.intersection(namespace))
        if clash:
            raise DependencyError(f"{clash[0]!r} is reserved by groupquant.inject")
        cls = super().__new__(mcs, class_name, bases, namespace)
        if extra:
            type.__setattr__(cls, "__extra_settings__", tuple(extra))
        return cls

    def describe(cls) -> Dict[str, Any]:
        """``describe(cls)``: the resolved plain settings of this injector."""
        return describe(cls)

    def format_settings(cls) -> str:
        """``format_settings(cls)``: the settings as an aligned table."""
        return format_settings(cls)


class Injector(_BaseInjector, metaclass=_InjectorType):
    """Base of every quantizer: settings and ``@value`` solvers, resolved by name.

    Declare ``__extra_settings__ = ("name", ...)`` to accept overrides that no
    setting or solver of the class reads (e.g. read by a subclass or a proxy).
    """


def extend(injector: type, **declarations: Any) -> type:
    """A subclass of ``injector`` with ``declarations`` added, unchecked.

    For library code that injects new runtime names (``let`` refuses them).
    """
    namespace = {"__module__": injector.__module__, "__qualname__": injector.__qualname__}
    namespace.update(declarations)
    return type(injector)(injector.__name__, (injector,), namespace)


def _let(cls: type, **overrides: Any) -> type:
    """Checked ``let``: unknown names raise ``UnknownSettingError``."""
    check_overrides(cls, overrides, "let()")
    return extend(cls, **overrides)


# Class-body names cannot be "let", so install the checked one afterwards.
type.__setattr__(Injector, "let", classmethod(_let))


def _nested_parent_reads(nested: type) -> set:
    """Names a nested injector reads from its parent with ``(this << 1).name``."""
    names = set()
    for spec in nested.__dependencies__.values():
        expr = getattr(spec[1], "__expression__", ()) if spec[0] == "this" else ()
        if len(expr) > 1 and expr[0] == (".", "__parent__") and expr[1][0] == ".":
            names.add(expr[1][1])
    return names


def known_settings(injector: type) -> FrozenSet[str]:
    """Every name ``let`` accepts for ``injector``.

    Declared names (own and inherited), the argument names of solvers and of
    injected classes' ``__init__`` (so optional inputs count), names nested
    injectors read from their parent, and ``__extra_settings__`` of the MRO.
    """
    if not isinstance(injector, type(_BaseInjector)):
        raise TypeError(f"expected an Injector subclass, got {injector!r}")
    names = set()
    for name, spec in injector.__dependencies__.items():
        names.add(name)
        names.update(spec[2])
        if spec[0] == "nested_injector":
            names.update(_nested_parent_reads(spec[1].injector))
    for base in injector.__mro__:
        names.update(base.__dict__.get("__extra_settings__", ()))
    return frozenset(n for n in names if not (n.startswith("__") and n.endswith("__")))


def _unknown(injector: type, key: str, known: FrozenSet[str], context: str,
             prefix: str) -> UnknownSettingError:
    """The error for one unknown key, with the closest known name if any."""
    shown = prefix + key
    head = f"{context} got unknown setting {shown!r} for {injector.__name__}"
    match = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
    if match:
        return UnknownSettingError(shown, f"{head}; did you mean {prefix + match[0]!r}?",
                                   prefix + match[0])
    public = sorted(prefix + n for n in known if not n.startswith("_"))
    listing = ", ".join(public) if public else "(none)"
    return UnknownSettingError(shown, f"{head}; known settings: {listing}")


def check_overrides(injector: Optional[type], overrides: Mapping[str, Any],
                    context: str, *, prefix: str = "") -> None:
    """Raise ``UnknownSettingError`` (a ValueError) on the first unknown key.

    ``overrides`` holds the keys as given to ``let`` (prefix stripped);
    ``prefix`` (e.g. ``"weight_"``) and ``context`` (e.g. ``"QuantLinear"``)
    only shape the message, which names the keyword the user typed.
    With ``injector`` None any override is an error: nothing would read it.
    """
    if injector is None:
        if overrides:
            key = prefix + next(iter(overrides))
            message = f"{context} got setting {key!r} but no quantizer is set"
            raise UnknownSettingError(key, message)
        return
    known = known_settings(injector)
    for key in overrides:
        if key not in known:
            raise _unknown(injector, key, known, context, prefix)


@dataclass(frozen=True)
class _Opaque:
    """Placeholder for a setting ``describe`` does not resolve to a plain value."""

    text: str
    missing: bool = False


def _is_plain(obj: Any) -> bool:
    """int, float, str, bool, Enum, None, or a tuple of those."""
    if isinstance(obj, tuple):
        return all(_is_plain(item) for item in obj)
    return isinstance(obj, _PLAIN_TYPES) and not inspect.isclass(obj)


def _opaque_object(obj: Any) -> _Opaque:
    """Placeholder for a resolved object that is not plain."""
    if inspect.isclass(obj):
        return _Opaque(f"<class {obj.__qualname__}>")
    if inspect.isroutine(obj):
        return _Opaque(f"<function {obj.__qualname__}>")
    return _Opaque(f"<instance {type(obj).__qualname__}>")


def _opaque_spec(spec: tuple) -> _Opaque:
    """Placeholder for a declaration describe never builds."""
    marker, attr = spec[0], spec[1]
    if marker == "nested_injector":
        return _Opaque(f"<injector {attr.injector.__name__}>")
    if marker == "lazy_import":
        return _Opaque(f"<package {attr.__name__}>")
    if inspect.isclass(attr):
        return _Opaque(f"<builds {attr.__qualname__}>")
    if isinstance(attr, _OperationSpec):
        return _Opaque(f"<operation {attr.__name__}>")
    return _Opaque(f"<{type(attr).__name__}>")


def _input_blocker(deps: dict, arg: str, required: bool, memo: dict) -> Optional[_Opaque]:
    """Why input ``arg`` stops a cheap resolution, or None if it does not."""
    if arg == "__self__":
        return None
    if arg not in deps:
        return _Opaque(f"<missing input {arg!r}>", missing=True) if required else None
    inner = _blocker(deps, arg, memo)
    if inner is None or inner.missing:
        return inner
    return _Opaque(f"<uses object {arg!r}>")


def _blocker(deps: dict, name: str, memo: dict) -> Optional[_Opaque]:
    """None if ``name`` resolves by calling solvers only (no class built,
    no nested injector, no import, no missing input); else a placeholder."""
    if name not in memo:
        spec = deps[name]
        attr = spec[1]
        if isinstance(attr, _RawSpec):
            result = None
        elif spec[0] == "this":
            first = attr.__expression__[0][1]
            result = (_Opaque("<parent reference>") if first == "__parent__"
                      else _input_blocker(deps, first, True, memo))
        elif inspect.isfunction(attr):
            params = inspect.signature(attr).parameters.values()
            blockers = (_input_blocker(deps, p.name, p.default is p.empty, memo)
                        for p in params)
            result = next((b for b in blockers if b is not None), None)
        else:
            result = _opaque_spec(spec)
        memo[name] = result
    return memo[name]


def _inspect(injector: type) -> Dict[str, Any]:
    """Public name -> resolved plain value or ``_Opaque``, in declaration order."""
    deps, memo, out = injector.__dependencies__, {}, {}
    for name in deps:
        if name.startswith("_"):
            continue
        blocked = _blocker(deps, name, memo)
        if blocked is None:
            resolved = getattr(injector, name)
            blocked = None if _is_plain(resolved) else _opaque_object(resolved)
            out[name] = resolved if blocked is None else blocked
        else:
            out[name] = blocked
    return out


def describe(injector: type) -> Dict[str, Any]:
    """Name -> resolved value of every public setting and solver that is plain.

    Solvers are called only when everything they need is a plain value or
    another such solver: classes to instantiate, nested injectors and packages
    are never built, and names whose inputs are missing are left out, as are
    results that are not plain (classes, callables, modules). Names starting
    with ``_`` are private and left out. A solver's ``ConfigError`` propagates.
    """
    return {k: v for k, v in _inspect(injector).items() if not isinstance(v, _Opaque)}


def _format_value(obj: Any) -> str:
    """Short text of a value: enums as ``Type.NAME``, placeholders as is."""
    if isinstance(obj, _Opaque):
        return obj.text
    if isinstance(obj, Enum):
        return f"{type(obj).__name__}.{obj.name}"
    if isinstance(obj, tuple):
        inner = ", ".join(_format_value(item) for item in obj)
        return f"({inner},)" if len(obj) == 1 else f"({inner})"
    return repr(obj)


def format_settings(injector: type) -> str:
    """Aligned two-column table of ``describe`` plus placeholders such as
    ``<builds ScalingImpl>`` or ``<missing input 'x'>`` for the rest."""
    rows = [(name, _format_value(v)) for name, v in _inspect(injector).items()]
    width = max((len(name) for name, _ in rows), default=0)
    return "\n".join(f"{name.ljust(width)}  {text}" for name, text in rows)
