"""Float element formats paired with the ml_dtypes type that encodes them bit for bit (the test oracle)."""
from __future__ import annotations

import ml_dtypes

from groupquant.formats import FloatFormat, SpecialValues, get_format

#: (label, groupquant format, ml_dtypes type)
FLOAT_CASES = [
    ("fp8_e4m3", get_format("fp8_e4m3"), ml_dtypes.float8_e4m3fn),
    ("fp8_e5m2", get_format("fp8_e5m2"), ml_dtypes.float8_e5m2),
    ("fp6_e3m2", get_format("fp6_e3m2"), ml_dtypes.float6_e3m2fn),
    ("fp6_e2m3", get_format("fp6_e2m3"), ml_dtypes.float6_e2m3fn),
    ("fp4_e2m1", get_format("fp4_e2m1"), ml_dtypes.float4_e2m1fn),
    ("fnuz_e4m3", get_format("float_fnuz_e4m3"), ml_dtypes.float8_e4m3fnuz),
    ("fnuz_e5m2", get_format("float_fnuz_e5m2"), ml_dtypes.float8_e5m2fnuz),
    ("ieee_e4m3", FloatFormat(4, 3, SpecialValues.IEEE), ml_dtypes.float8_e4m3),
    ("ieee_e3m4", FloatFormat(3, 4, SpecialValues.IEEE), ml_dtypes.float8_e3m4),
]
