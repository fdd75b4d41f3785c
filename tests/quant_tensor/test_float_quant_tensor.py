import numpy as np
import pytest
import torch

from groupquant.formats import FloatFormat, SpecialValues
from groupquant.quant_tensor import FloatQuantTensor, quant_tensor_from_output
from groupquant.quantizers import Fp8e4m3WeightPerTensor

ml_dtypes = pytest.importorskip("ml_dtypes")


def test_fp8_codes_are_the_ml_dtypes_bits():
    w = torch.randn(10, 20) * 7
    q = quant_tensor_from_output(Fp8e4m3WeightPerTensor.tensor_quant(w), Fp8e4m3WeightPerTensor.element_format)
    assert isinstance(q, FloatQuantTensor) and q.bit_width == 8
    assert q.nan_inf_rule is SpecialValues.NAN_ONLY and q.fmt == FloatFormat(4, 3)
    elements = (w / q.scale).clamp(-448, 448).numpy().astype(ml_dtypes.float8_e4m3fn)
    np.testing.assert_array_equal(q.codes().numpy(), elements.view(np.uint8))
    np.testing.assert_array_equal(q.minifloat().numpy(), elements.astype(np.float32))
    assert torch.equal(q.minifloat() * q.scale, q.value)
