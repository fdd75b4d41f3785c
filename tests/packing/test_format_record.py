import pytest

from groupquant.formats import MX_FORMATS, FloatFormat, IntFormat, SpecialValues, get_format
from groupquant.packing import format_from_record, format_record


@pytest.mark.parametrize("fmt", [*(get_format(n) for n in MX_FORMATS), IntFormat(5, signed=False, frac_bits=2),
                                 FloatFormat(4, 3, SpecialValues.FNUZ), FloatFormat(3, 4, bias=5, name="mine")])
def test_round_trip_keeps_every_derived_constant(fmt):
    back = format_from_record(format_record(fmt))
    assert back == fmt and back.name == fmt.name and back.describe() == fmt.describe()


def test_bad_records_are_named():
    with pytest.raises(ValueError, match="'kind'"):
        format_from_record({"kind": "posit"})
    with pytest.raises(ValueError, match="bias"):
        format_from_record({k: v for k, v in format_record(get_format("fp4_e2m1")).items() if k != "bias"})
    with pytest.raises(ValueError, match="special_values"):
        format_from_record({**format_record(get_format("fp4_e2m1")), "special_values": "weird"})
    with pytest.raises(TypeError, match="dict"):
        format_from_record("fp4_e2m1")
