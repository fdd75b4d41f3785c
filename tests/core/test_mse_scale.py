"""MSEScale / mse_scale against a brute-force search written here: per group, every exponent of
the window in float64, elements rounded by ml_dtypes (float formats) or numpy (MXINT8)."""
import math

import ml_dtypes
import numpy as np
import pytest
import torch




import groupquant as gq
from groupquant.core import MSEScale, QuantSpec, ScaleGranularity, build_tensor_quant, mse_scale
from groupquant.ops import FakeQuantResult
from groupquant.formats import get_format

#: format name -> (emax, element rounding of a float64 array already divided by the scale)
_ORACLES = {
    "fp8_e4m3": (8, lambda y: np.clip(y, -448.0, 448.0).astype(ml_dtypes.float8_e4m3fn).astype(np.float64)),
    "fp6_e2m3": (2, lambda y: np.clip(y, -7.5, 7.5).astype(ml_dtypes.float6_e2m3fn).astype(np.float64)),
    "fp4_e2m1": (2, lambda y: np.clip(y, -6.0, 6.0).astype(ml_dtypes.float4_e2m1fn).astype(np.float64)),
    "int8": (0, lambda y: np.clip(np.round(y * 64.0), -127, 127) / 64.0),  # 1.6 fixed point, symmetric
}
BELOW, ABOVE = 3, 1


def _error(block: np.ndarray, exponent: int, name: str) -> float:
    """Squared error of one block (float64) quantized with scale 2**exponent."""
    scale = math.ldexp(1.0, exponent)
    q = _ORACLES[name][1](block / scale) * scale
    return float(np.sum((q - block) ** 2))


def _brute_force(block: np.ndarray, name: str, below: int = BELOW, above: int = ABOVE) -> float:
    """The expected scale of one block: every candidate tried, strict improvement, largest first."""
    if not np.all(np.isfinite(block)):
        return float("nan")
    amax = float(np.max(np.abs(block)))
    if amax == 0.0:
        return math.ldexp(1.0, -127)
    emax = _ORACLES[name][0]
    e0 = math.frexp(amax)[1] - 1 - emax
    cap = min(127, 127 - emax)  # float32 input: its largest binade is 127
    best_e, best_err = None, math.inf
    for e in range(e0 + above, e0 - below - 1, -1):
        e = min(max(e, -127), cap)
        err = _error(block, e, name)
        if err < best_err:
            best_e, best_err = e, err
    return math.ldexp(1.0, best_e)


def _rows_of_groups(x: torch.Tensor, size: int = 32):
    """Blocks of ``size`` along the last dim of a 2-d tensor, zero-padded: [rows, k, size] float64."""
    a = x.double().numpy()
    k = -(-a.shape[1] // size)
    padded = np.zeros((a.shape[0], k * size))
    padded[:, : a.shape[1]] = a
    return padded.reshape(a.shape[0], k, size)


def _data(seed: int) -> torch.Tensor:
    """Rows of 100 (3 groups + 4 of padding): elements over 2**-10 .. 2**10, rows shifted by up
    to 2**+-40, a few outliers, one zero group, NaN and Inf groups, groups at the E8M0 ends, a
    tie and a group the floor rule saturates."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(24, 100, generator=g) * 2.0 ** torch.randint(-10, 11, (24, 100), generator=g).float()
    x *= 2.0 ** torch.randint(-40, 41, (24, 1), generator=g).float()
    outliers = torch.rand(24, 100, generator=g) < 0.03
    x = torch.where(outliers, x * 2.0 ** 8, x)
    x[0, :32] = 0.0
    x[1, 40] = float("nan")
    x[2, 70] = float("inf")
    x[3] = torch.randn(100, generator=g) * 2.0 ** -135  # float32 subnormals: exponents clamp at -127
    x[4] = torch.randn(100, generator=g).clamp(-1.9, 1.9) * 2.0 ** 126  # near float32's top: the cap
    x[5, 64:] = 1.0  # exactly representable at several scales: a tie (group of 32 real + 4 padded)
    x[6, 32:64] = 63.968 * (-1.0) ** torch.arange(32)  # significand above MXINT8's 127/64: floor saturates
    return x


@pytest.mark.parametrize("name", sorted(_ORACLES))
def test_group_scales_equal_the_brute_force_search(name):
    x = _data(7)
    fmt = get_format(name)
    scale = mse_scale(x, fmt, ScaleGranularity("group", -1, 32))
    assert scale.shape == (24, 4, 1) and scale.dtype == torch.float32
    blocks = _rows_of_groups(x)
    expected = np.array([[_brute_force(b, name) for b in row] for row in blocks], dtype=np.float32)[..., None]
    assert np.array_equal(scale.numpy(), expected, equal_nan=True)
    floor = gq.quantize(x, name, 32, -1).scale
    assert not torch.equal(scale.nan_to_num(), floor.nan_to_num())  # the search does move some scales


@pytest.mark.parametrize("name", sorted(_ORACLES))
def test_error_is_never_worse_than_the_floor_rule(name):
    x = _data(11)
    fmt = get_format(name)
    g = ScaleGranularity("group", -1, 32)
    out = build_tensor_quant(QuantSpec("mse", fmt, "group", 32, -1, stats_op="mse"))(x)  # the quantizer route
    assert isinstance(out, FakeQuantResult) and torch.equal(out.scale.nan_to_num(), mse_scale(x, fmt, g).nan_to_num())
    mse_value = g.layout(x.shape).expand(out.value)
    floor_value = gq.fake_quant(x, name, 32, -1)
    finite = torch.isfinite(x).all(dim=1)
    assert torch.isnan(mse_value[~finite]).any(dim=1).all()  # NaN / Inf groups come out NaN
    err_mse = _rows_of_groups((mse_value - x)[finite].double() ** 2).sum(-1)
    err_floor = _rows_of_groups((floor_value - x)[finite].double() ** 2).sum(-1)
    assert np.all(err_mse <= err_floor)
    assert np.any(err_mse < err_floor)


def test_hand_built_groups():
    fmt, g = get_format("fp4_e2m1"), ScaleGranularity("group", -1, 32)
    x = torch.zeros(4, 32)
    x[1] = 1.0  # 2**-2 (floor) and 2**-1 both give zero error: ties go to the larger scale
    x[2] = 7.0  # floor 2**0 saturates 7 -> 6; 2**1 gives 8 (error 1 each, a tie again) -> 2**1
    x[3, 0], x[3, 1:] = 8.0, 0.4  # floor 2**1: 8 exact, 0.4 -> 0 (31 x 0.16 = 4.96); 2**0: 8 -> 6 (4),
    # 0.4 -> 0.5 (31 x 0.01 = 0.31): 4.31 wins; 2**-1: 8 -> 3 (25); 2**2: 0.4 -> 0 again (4.96)
    s = mse_scale(x, fmt, g).flatten().tolist()
    assert s == [2.0 ** -127, 0.5, 2.0, 1.0]


@pytest.mark.parametrize("name", ["fp8_e4m3", "fp4_e2m1", "int8"])
def test_channel_and_tensor_granularity_and_the_window(name):
    x = _data(5)[6:14, :96]
    fmt = get_format(name)
    per_channel = mse_scale(x, fmt, ScaleGranularity("channel", 0), below=4, above=2)
    assert per_channel.shape == (8, 1)
    expected = [_brute_force(row.double().numpy(), name, 4, 2) for row in x]
    assert per_channel.flatten().tolist() == expected
    per_tensor = mse_scale(x, fmt, ScaleGranularity("tensor"), below=0, above=0)
    assert per_tensor.shape == () and float(per_tensor) == _brute_force(x.double().numpy().ravel(), name, 0, 0)
    assert float(per_tensor) == float(gq.quantize(x.reshape(1, -1), name, None, -1).scale)  # window 0: floor rule


def test_channel_dim_one_of_a_conv_weight_and_bfloat16_input():
    w = (torch.randn(6, 40, 3) * 2.0 ** torch.randint(-6, 7, (6, 40, 1)).float()).bfloat16()
    fmt, g = get_format("fp6_e2m3"), ScaleGranularity("group", 1, 32)
    scale = MSEScale(fmt, g)(w)
    assert scale.shape == (6, 2, 1, 3)
    blocks = _rows_of_groups(w.float().movedim(1, -1).reshape(18, 40))  # [(o, k), group, 32]
    expected = np.array([[_brute_force(b, "fp6_e2m3") for b in row] for row in blocks], dtype=np.float32)
    assert np.array_equal(scale.movedim(3, 1).reshape(18, 2).numpy(), expected)


def test_bad_settings_name_the_setting():
    fmt, g = get_format("fp8_e4m3"), ScaleGranularity("group", -1, 32)
    with pytest.raises(ValueError, match="below .* must be a non-negative int, got -1"):
        MSEScale(fmt, g, below=-1)
    with pytest.raises(ValueError, match="above .* must be a non-negative int, got 1.5"):
        MSEScale(fmt, g, above=1.5)
    with pytest.raises(ValueError, match="rounding must be one of .* got 'stochastic'"):
        MSEScale(fmt, g, rounding="stochastic")
    with pytest.raises(TypeError, match="fmt must be an element format"):
        mse_scale(torch.ones(32), "fp8_e4m3", g)
