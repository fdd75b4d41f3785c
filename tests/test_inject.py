"""Tests for groupquant.inject: checked overrides, errors, quantizer instances, and the
dependencies 2.0.1 quirks its module docstring promises."""
from __future__ import annotations

import enum
import pickle
import string
from difflib import SequenceMatcher

import dependencies
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from groupquant.inject import (
    ConfigError, DependencyError, Injector, UnknownSettingError, check_overrides,
    known_settings, this, value,
)


class Rounding(enum.Enum):
    EVEN = "even"
    AWAY = "away"


BUILT: list = []


class Impl:
    """A class to inject; records every instance so tests can see builds."""

    def __init__(self, bit_width, zero_point=0):
        self.bit_width, self.zero_point = bit_width, zero_point
        BUILT.append(self)


class BaseQuant(Injector):
    bit_width = 8
    exponent_bit_width = 4
    rounding = Rounding.EVEN
    impl = Impl
    impl_class = Impl
    _private = "hidden"

    @value
    def mantissa_bit_width(bit_width, exponent_bit_width, signed=True):
        return bit_width - exponent_bit_width - int(signed)


class MyQuant(BaseQuant):
    group_size = 32
    block_shape = (1, 32)
    alias = this.group_size
    nothing = None

    @value
    def uses_impl(impl):
        return impl.bit_width

    @value
    def quant_name(__self__):
        return __self__.__name__

    @value
    def needs(missing_thing):
        return missing_thing


class Outer(Injector):
    scale = 2.0

    class Inner(Injector):
        factor = (this << 1).outer_only


KNOWN = known_settings(MyQuant)
PUBLIC = sorted(n for n in KNOWN if not n.startswith("_"))


# --- overrides -----------------------------------------------------------

def test_let_overrides_known_setting_and_leaves_original_alone():
    assert MyQuant.let(bit_width=6).mantissa_bit_width == 1
    assert MyQuant.mantissa_bit_width == 3


def test_let_accepts_optional_solver_input_and_init_argument():
    assert MyQuant.let(signed=False).mantissa_bit_width == 4
    assert MyQuant.let(zero_point=5).impl.zero_point == 5
    assert MyQuant.let(missing_thing=7).needs == 7


def test_let_accepts_name_a_nested_injector_reads_from_parent():
    assert "outer_only" in known_settings(Outer)
    assert Outer.let(outer_only=3).Inner.factor == 3


def test_let_unknown_name_message_and_fields():
    with pytest.raises(UnknownSettingError) as info:
        MyQuant.let(bitwidth=4)
    assert str(info.value) == (
        "let() got unknown setting 'bitwidth' for MyQuant; did you mean 'bit_width'?")
    assert isinstance(info.value, ConfigError) and isinstance(info.value, ValueError)
    assert (info.value.setting, info.value.suggestion) == ("bitwidth", "bit_width")


def test_unknown_name_without_close_match_lists_public_names():
    with pytest.raises(ValueError) as info:
        MyQuant.let(zzz=1)
    assert str(info.value).endswith("known settings: " + ", ".join(PUBLIC))
    assert "_private" not in str(info.value) and info.value.suggestion is None


def test_check_overrides_names_the_prefixed_keyword():
    with pytest.raises(ValueError) as info:
        check_overrides(MyQuant, {"bit_width": 4, "bitwidth": 4}, "QuantLinear", prefix="weight_")
    assert str(info.value) == ("QuantLinear got unknown setting 'weight_bitwidth' for MyQuant;"
                               " did you mean 'weight_bit_width'?")


def test_check_overrides_accepts_known_names_and_private_ones():
    assert check_overrides(MyQuant, {"bit_width": 4, "_private": 1}, "QuantLinear") is None
    assert MyQuant.let(_private="x")._private == "x"


def test_check_overrides_without_quantizer_rejects_any_keyword():
    check_overrides(None, {}, "QuantLinear", prefix="weight_")
    with pytest.raises(ValueError, match="'weight_bit_width' but no quantizer"):
        check_overrides(None, {"bit_width": 4}, "QuantLinear", prefix="weight_")


def test_check_overrides_rejects_a_non_injector():
    with pytest.raises(TypeError, match="expected an Injector"):
        check_overrides(dict, {"a": 1}, "QuantLinear")


def test_extra_settings_are_accepted_and_inherited():
    class WithExtra(BaseQuant):
        __extra_settings__ = ("module",)

    class Child(WithExtra):
        pass

    assert Child.let(module="m").module == "m"
    assert "__extra_settings__" not in WithExtra.__dependencies__
    with pytest.raises(UnknownSettingError):
        BaseQuant.let(module="m")


def test_extra_settings_must_be_a_tuple_of_names():
    with pytest.raises(TypeError, match="must be a tuple of names"):
        class Bad(Injector):
            __extra_settings__ = "module"


def test_let_chains_and_keeps_name_module_and_base():
    q = MyQuant.let(bit_width=6).let(signed=False)
    assert q.mantissa_bit_width == 2
    assert issubclass(q, MyQuant) and isinstance(q, type(Injector))
    assert (q.__name__, q.__qualname__, q.__module__) == ("MyQuant[bit_width=6, signed=False]",) * 2 + (__name__,)


def test_let_variants_pickle_as_parent_and_overrides():
    q = MyQuant.let(bit_width=6).let(signed=False)
    back = pickle.loads(pickle.dumps(q))
    assert back.__name__ == q.__name__ and back.mantissa_bit_width == 2 and issubclass(back, MyQuant)
    assert pickle.loads(pickle.dumps(MyQuant)) is MyQuant


@given(name=st.sampled_from(sorted(KNOWN)), setting=st.integers())
def test_any_known_name_is_accepted_by_let(name, setting):
    q = MyQuant.let(**{name: setting})
    assert name in q and q.__dependencies__[name][1]() == setting


@st.composite
def one_edit(draw):
    """A public name and the same name with one character edited."""
    name = draw(st.sampled_from(PUBLIC))
    i = draw(st.integers(0, len(name) - 1))
    ch = draw(st.sampled_from(string.ascii_lowercase + "_"))
    edit = draw(st.sampled_from(["delete", "insert", "replace", "swap"]))
    edited = {"delete": name[:i] + name[i + 1:], "insert": name[:i] + ch + name[i:],
              "replace": name[:i] + ch + name[i + 1:],
              "swap": name[:i] + name[i + 1:i + 2] + name[i:i + 1] + name[i + 2:]}[edit]
    return name, edited


@given(pair=one_edit(), prefix=st.sampled_from(["", "weight_", "input_"]))
def test_perturbed_unknown_name_is_rejected_with_the_original_suggested(pair, prefix):
    name, bad = pair
    assume(bad and bad not in KNOWN)
    ratio = SequenceMatcher(None, name, bad).ratio()
    assume(all(SequenceMatcher(None, other, bad).ratio() < ratio for other in KNOWN - {name}))
    with pytest.raises(UnknownSettingError) as info:
        check_overrides(MyQuant, {bad: 1}, "QuantConv2d", prefix=prefix)
    assert info.value.suggestion == prefix + name
    assert str(info.value) == (f"QuantConv2d got unknown setting {prefix + bad!r} for MyQuant;"
                               f" did you mean {prefix + name!r}?")


# --- describe, quantizer instances -----------------------------------------

def test_describe_is_the_quantizers_describer_and_is_no_setting():
    import groupquant as gq
    from groupquant.quantizers import MXFloat4e2m1Weight

    assert MXFloat4e2m1Weight.describe() == gq.describe(MXFloat4e2m1Weight)
    assert "describe" not in MyQuant and "describe" not in KNOWN
    with pytest.raises(TypeError, match="MyQuant has no describer"):
        MyQuant.describe()


@pytest.mark.parametrize("slot", ["weight_quant", "input_quant"])
def test_a_quantizer_instance_where_a_class_is_expected_names_the_setting(slot):
    from groupquant.nn import QuantLinear
    from groupquant.quantizers import MXFloat8e4m3Act, MXFloat8e4m3Weight

    quantizer = MXFloat8e4m3Weight if slot == "weight_quant" else MXFloat8e4m3Act
    with pytest.raises(TypeError) as info:
        QuantLinear(8, 8, **{slot: quantizer()})
    message = str(info.value)
    assert f"{slot} must be a quantizer class" in message
    assert f"pass the class {quantizer.__name__} itself" in message
    assert not isinstance(info.value, DependencyError)


def test_a_quantizer_instance_refuses_every_use_with_the_advice():
    placeholder = MyQuant(1, bit_width=4)
    for use in (lambda: placeholder.bit_width, lambda: placeholder(), lambda: setattr(placeholder, "x", 1)):
        with pytest.raises(TypeError, match="pass the class MyQuant itself"):
            use()


def test_helper_names_are_reserved():
    with pytest.raises(DependencyError, match="'describe' is reserved"):
        class Bad(Injector):
            describe = 1


# --- errors ----------------------------------------------------------------

def test_config_error_names_the_setting():
    err = ConfigError("bit_width", "must be 1 + exponent + mantissa bits, got 9")
    assert isinstance(err, ValueError) and err.setting == "bit_width"
    assert str(err) == "invalid setting 'bit_width': must be 1 + exponent + mantissa bits, got 9"


@pytest.mark.parametrize("err", [ConfigError("bit_width", "too wide"),
                                 UnknownSettingError("x", "no x", "y")])
def test_config_errors_pickle(err):
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is type(err) and str(back) == str(err) and back.setting == err.setting


def _failing(err):
    class Failing(Injector):
        bit_width = 9

        @value
        def checked(bit_width):
            raise err

        @value
        def derived(checked):
            return checked

        class Inner(Injector):
            uses = (this << 1).derived

    return Failing


@pytest.mark.parametrize("err", [ConfigError("bit_width", "too wide"), ValueError("plain")])
@pytest.mark.parametrize("path", ["checked", "derived", "nested"])
def test_solver_errors_reach_the_user_unchanged(err, path):
    q = _failing(err)
    read = {"checked": lambda: q.checked, "derived": lambda: q.derived,
            "nested": lambda: q.Inner.uses}[path]
    with pytest.raises(type(err)) as info:
        read()
    assert info.value is err and not isinstance(info.value, DependencyError)


# --- dependencies 2.0.1 quirks ---------------------------------------------

def test_quirk_class_suffix_decides_instantiation():
    class Returns(Injector):
        @value
        def impl():
            return Impl

    assert isinstance(MyQuant.impl, Impl) and MyQuant.impl_class is Impl
    assert Returns.impl is Impl


def test_quirk_reading_a_setting_resolves_it_again_each_time():
    calls = []

    class Counting(Injector):
        @value
        def x():
            calls.append(1)
            return len(calls)

    assert (Counting.x, Counting.x) == (1, 2)


def test_quirk_missing_name_is_a_dependency_error_so_hasattr_raises():
    assert DependencyError is dependencies.exceptions.DependencyError
    with pytest.raises(DependencyError, match="can not resolve attribute 'nope'"):
        MyQuant.nope
    with pytest.raises(DependencyError):
        hasattr(MyQuant, "nope")
    assert "bit_width" in MyQuant and "nope" not in MyQuant


def test_quirk_only_the_last_required_solver_argument_escapes_as_type_error():
    class Two(Injector):
        @value
        def f(a, b):
            return a + b

    with pytest.raises(TypeError, match="'b'"):
        Two.let(a=1).f
    with pytest.raises(DependencyError, match="'a' while building 'f'"):
        Two.let(b=1).f


def test_quirk_attribute_error_in_a_solver_is_swallowed_by_getattr_default():
    class Typo(Injector):
        @value
        def x():
            raise AttributeError("typo inside the solver")

    assert getattr(Typo, "x", "swallowed") == "swallowed"


def test_quirk_underscore_names_mangling_and_dunders():
    class Names(Injector):
        __hidden = 3
        _single = 2

        @value
        def total(__hidden, _single):
            return __hidden + _single

    assert Names.total == 5 and "_Names__hidden" in Names and "__hidden" not in Names
    with pytest.raises(DependencyError, match="Magic methods are not allowed"):
        type(Injector)("Bad", (Injector,), {"__custom__": 1})


def test_python313_class_body_entries_and_annotations_are_dropped():
    body = {"__module__": __name__, "__qualname__": "Q", "__firstlineno__": 1,
            "__static_attributes__": (), "__annotations__": {"a": int}, "a": 1}
    with pytest.raises(DependencyError, match="Magic methods"):
        type(dependencies.Injector)("Q", (dependencies.Injector,), dict(body))
    assert type(Injector)("Q", (Injector,), dict(body)).a == 1

    class Annotated(Injector):
        bit_width: int = 8

    assert Annotated.bit_width == 8


def test_quirk_plain_let_is_unchecked_which_is_why_ours_checks():
    class Plain(dependencies.Injector):
        bit_width = 8

    assert Plain.let(bitwidth=4).bitwidth == 4
    assert issubclass(Injector, dependencies.Injector)
