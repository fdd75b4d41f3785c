"""The thin layer over ``dependencies`` 2.0.1 that every quantizer is built on.

Adds what Brevitas users miss: ``Q.let(...)`` and layer keywords with an unknown
name fail with a did-you-mean (:func:`closest`, the one rule every
unknown-name error of groupquant suggests by), ``ConfigError`` names the
setting a solver rejects, a quantizer instance (``Q()``) passed where a class is expected
is refused naming the setting, and ``Q.describe()`` reaches the quantizers' ``describe``.
The rest of groupquant imports this module, never ``dependencies``.

Quirks of dependencies 2.0.1 (each pinned by a test in tests/test_inject.py):

* Every class-body name becomes a dependency; nothing is stored on the class.
  Reading ``Q.x`` resolves ``x`` and all it needs, anew on each access. Body
  functions are raw values, not methods: our helpers live on the metaclass,
  so ``describe`` cannot be a setting name.
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

import copyreg
import difflib
import weakref
from enum import Enum
from typing import Any, Dict, FrozenSet, Iterable, Mapping, Optional

from _dependencies.value import Value
from dependencies import Injector as _BaseInjector
from dependencies import this, value
from dependencies.exceptions import DependencyError


__all__ = [
    "ConfigError", "DependencyError", "Injector", "UnknownSettingError",
    "check_name", "check_overrides", "closest", "did_you_mean", "known_settings", "this", "value",
    "variant_name", "SUGGEST_CUTOFF",
]

# Class-body entries the compiler adds that carry no setting (3.13+: first two).
_DROPPED_DUNDERS = frozenset({
    "__firstlineno__", "__static_attributes__", "__annotations__",
    "__annotate__", "__annotate_func__", "__classdictcell__",
})
_RESERVED = frozenset({"describe"})


#: Similarity (difflib's ratio, 0..1) a known name needs to be suggested for a misspelled one.
SUGGEST_CUTOFF = 0.6


def closest(name: str, known: Iterable[str], cutoff: float = SUGGEST_CUTOFF) -> Optional[str]:
    """The known name most similar to ``name`` (difflib ratio at least ``cutoff``), or None.

    The one did-you-mean rule: quantizer settings, layer keywords, recipe slots, spec keys and CLI
    names all suggest through it, so a misspelling gets the same suggestion wherever it is typed."""
    match = difflib.get_close_matches(str(name), sorted(set(known)), n=1, cutoff=cutoff)
    return match[0] if match else None


def did_you_mean(name: str, known: Iterable[str], cutoff: float = SUGGEST_CUTOFF, prefix: str = "") -> str:
    """``"; did you mean 'x'?"`` for the :func:`closest` known name (shown with ``prefix``), or ``""``."""
    match = closest(name, known, cutoff)
    return f"; did you mean {prefix + match!r}?" if match is not None else ""


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


_HOOKS = ("__vocabulary__", "__derived__", "__foreign__")


def _is_solver(obj: Any) -> bool:
    """A ``value(...)`` solver, a nested injector or a ``this`` expression: code, not a setting."""
    return isinstance(obj, Value) or isinstance(obj, type(this)) or (
        isinstance(obj, type) and issubclass(obj, _BaseInjector))


def _hook(cls: type, name: str) -> Any:
    """A vocabulary hook of ``cls`` (see :class:`Injector`), from its MRO, or None."""
    for base in cls.__mro__:
        if name in base.__dict__:
            return base.__dict__[name]
    return None


def _variant_text(given: Any) -> str:
    """Short text of an override value in a variant's name: enums by value, classes by name."""
    if isinstance(given, Enum):
        return str(given.value)
    if isinstance(given, type):
        return given.__name__
    if isinstance(given, str):
        return given
    return repr(given)


class _InjectorType(type(_BaseInjector)):
    """Metaclass: Python 3.13 class bodies, ``__extra_settings__``, checked bodies, helpers."""

    def __new__(mcs, class_name, bases, namespace):
        namespace = {k: v for k, v in namespace.items() if k not in _DROPPED_DUNDERS}
        extra = namespace.pop("__extra_settings__", ())
        let_of = namespace.pop("__let_of__", None)
        hooks = {name: namespace.pop(name) for name in _HOOKS if name in namespace}
        if isinstance(extra, str) or not all(isinstance(n, str) for n in extra):
            raise TypeError(f"{class_name}.__extra_settings__ must be a tuple of names")
        clash = sorted(_RESERVED.intersection(namespace))
        if clash:
            raise DependencyError(f"{clash[0]!r} is reserved by groupquant.inject")
        cls = super().__new__(mcs, class_name, bases, namespace)
        if extra:
            type.__setattr__(cls, "__extra_settings__", tuple(extra))
        for name, hook in hooks.items():
            type.__setattr__(cls, name, hook)
        if let_of is not None:
            type.__setattr__(cls, "__let_of__", let_of)
        if _hook(cls, "__vocabulary__") is not None:
            known = frozenset().union(*(known_settings(b) for b in bases if isinstance(b, _InjectorType)))
            known = known.union(_hook(cls, "__vocabulary__"), cls.__dict__.get("__extra_settings__", ()))
            for name, given in namespace.items():
                if not name.startswith("_") and not _is_solver(given):
                    check_name(cls, name, "class body", context_name=class_name, known=known)
        return cls

    def describe(cls) -> Dict[str, Any]:
        """The resolved settings, by the ``__describer__`` hook (``groupquant.quantizers.describe``)."""
        describer = _hook(cls, "__describer__")
        if describer is None:
            raise TypeError(f"{cls.__name__} has no describer (only quantizers describe themselves)")
        return describer(cls)

    def __call__(cls, *args: Any, **kwargs: Any) -> "QuantizerInstance":
        """``Q()``: quantizers are classes of settings, never instantiated. The result is a
        placeholder that refuses every use, so that the layer it is passed to names the setting
        (``weight_quant must be a quantizer class ..., got MXFloat8e4m3Weight() (an instance:
        pass the class MXFloat8e4m3Weight itself)``) instead of ``Do not instantiate Injector``."""
        return QuantizerInstance(cls)


class QuantizerInstance:
    """What ``Q()`` gives: a placeholder that says to pass the class ``Q`` itself."""

    __slots__ = ("_quantizer",)

    def __init__(self, quantizer: type):
        object.__setattr__(self, "_quantizer", quantizer)

    def _advice(self) -> str:
        name = object.__getattribute__(self, "_quantizer").__name__
        return (f"{name}() (an instance: quantizers are classes of settings, never instantiated; pass the class "
                f"{name} itself, without the parentheses, and change settings with {name}.let(...) or a "
                f"layer keyword)")

    def __repr__(self) -> str:
        return self._advice()

    def __getattr__(self, name: str) -> Any:
        raise TypeError(f"{self._advice()}: it has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        raise TypeError(self._advice())

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(self._advice())


def _reduce_injector(cls: type) -> Any:
    """Pickle support: a ``let`` variant pickles as (its parent, its overrides); others by name."""
    let_of = cls.__dict__.get("__let_of__")
    if let_of is not None:
        return _rebuild_variant, let_of
    return cls.__qualname__


def _rebuild_variant(parent: type, overrides: Dict[str, Any]) -> type:
    """Unpickle a ``let`` variant: the same overrides on the same parent."""
    return parent.let(**overrides)


copyreg.pickle(_InjectorType, _reduce_injector)


class Injector(_BaseInjector, metaclass=_InjectorType):
    """Base of every quantizer: settings and ``@value`` solvers, resolved by name.

    Declare ``__extra_settings__ = ("name", ...)`` to accept overrides that no
    setting or solver of the class reads (e.g. read by a subclass or a proxy).

    Checked bodies: a class (or a base) that declares ``__vocabulary__`` (a collection of
    setting names) has every plain name of its body and of ``let`` checked when it is defined:
    names in ``__derived__`` (name -> why) are refused, names in ``__foreign__`` (another
    library's name -> message) get that message, anything else unknown a did-you-mean.
    ``value(...)`` solvers, nested injectors, ``this`` expressions and ``_private`` names are
    not checked.
    """


def variant_name(injector: type, overrides: Mapping[str, Any]) -> str:
    """``Base[name=value, ...]``: the name of ``injector`` with ``overrides`` (a variant's
    overrides are merged into its parent's, so names do not nest)."""
    let_of = injector.__dict__.get("__let_of__")
    if let_of is not None:
        injector, overrides = let_of[0], {**let_of[1], **overrides}
    inside = ", ".join(f"{k}={_variant_text(v)}" for k, v in overrides.items())
    return f"{injector.__name__}[{inside}]" if inside else injector.__name__


def _let(cls: type, **overrides: Any) -> type:
    """Checked ``let``: unknown names raise ``UnknownSettingError``; the variant is named for what
    differs (``Q[group_size=16]``) and pickles as (parent, overrides)."""
    check_overrides(cls, overrides, "let()")
    if not overrides:
        return cls
    let_of = cls.__dict__.get("__let_of__")
    parent, merged = (let_of[0], {**let_of[1], **overrides}) if let_of is not None else (cls, dict(overrides))
    name = variant_name(parent, merged)
    namespace = {"__module__": cls.__module__, "__qualname__": name, "__let_of__": (parent, merged)}
    namespace.update(overrides)
    return type(cls)(name, (cls,), namespace)


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


_KNOWN: "weakref.WeakKeyDictionary[type, FrozenSet[str]]" = weakref.WeakKeyDictionary()


def known_settings(injector: type) -> FrozenSet[str]:
    """Every name ``let`` accepts for ``injector`` (computed once per class; see :func:`_known_settings`)."""
    if not isinstance(injector, type(_BaseInjector)):
        raise TypeError(f"expected an Injector subclass, got {injector!r}")
    known = _KNOWN.get(injector)
    if known is None:
        known = _KNOWN[injector] = _known_settings(injector)
    return known


def _known_settings(injector: type) -> FrozenSet[str]:
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
        names.update(base.__dict__.get("__vocabulary__", ()))
    derived = _hook(injector, "__derived__") or {}
    names.difference_update(derived)
    return frozenset(n for n in names if not (n.startswith("__") and n.endswith("__")))


def _unknown(injector: type, key: str, known: FrozenSet[str], context: str,
             prefix: str, who: Optional[str] = None) -> UnknownSettingError:
    """The error for one unknown key, with the closest known name if any."""
    shown = prefix + key
    head = f"{context} got unknown setting {shown!r} for {who or injector.__name__}"
    match = closest(key, known)
    if match is not None:
        return UnknownSettingError(shown, f"{head}; did you mean {prefix + match!r}?", prefix + match)
    public = sorted(prefix + n for n in known if not n.startswith("_"))
    listing = ", ".join(public) if public else "(none)"
    return UnknownSettingError(shown, f"{head}; known settings: {listing}")


def check_name(injector: type, key: str, context: str, *, prefix: str = "",
               context_name: Optional[str] = None, known: Optional[FrozenSet[str]] = None) -> None:
    """Raise for one name ``injector`` does not accept: ``ConfigError`` for a derived value,
    ``UnknownSettingError`` with the other library's mapping or a did-you-mean otherwise.

    ``prefix`` (``"weight_"``) and ``context`` (``"QuantLinear"``) only shape the message."""
    shown = prefix + key
    who = context_name or injector.__name__
    derived = _hook(injector, "__derived__") or {}
    if key in derived:
        raise ConfigError(shown, f"{context} of {who}: {key} is derived ({derived[key]}) and cannot be set; "
                                 "it follows from the width settings")
    known = known_settings(injector) if known is None else known
    foreign = _hook(injector, "__foreign__") or {}
    if key in foreign and key not in known:
        raise UnknownSettingError(shown, f"{context} of {who} got {shown!r}: {foreign[key]}")
    if key not in known:
        raise _unknown(injector, key, known, context, prefix, who)


def check_overrides(injector: Optional[type], overrides: Mapping[str, Any],
                    context: str, *, prefix: str = "") -> None:
    """Raise ``UnknownSettingError`` (a ValueError) on the first unknown key.

    ``overrides`` holds the keys as given to ``let`` (prefix stripped);
    ``prefix`` (e.g. ``"weight_"``) and ``context`` (e.g. ``"QuantLinear"``)
    only shape the message, which names the keyword the user typed.
    With ``injector`` None any override is an error: nothing would read it.
    Derived values and other libraries' names are refused as :func:`check_name` says.
    """
    if not overrides:
        return
    if injector is None:
        key = prefix + next(iter(overrides))
        message = f"{context} got setting {key!r} but no quantizer is set"
        raise UnknownSettingError(key, message)
    strict = _hook(injector, "__vocabulary__") is not None
    known = known_settings(injector)
    for key, given in overrides.items():
        if strict and not (key.startswith("_") or _is_solver(given)):
            check_name(injector, key, context, prefix=prefix)
        elif key not in known:
            raise _unknown(injector, key, known, context, prefix)
