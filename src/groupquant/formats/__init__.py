"""Number formats: element formats (integers, minifloats), scale formats (E8M0, E{k}M0, UE4M3,
float32, bfloat16) and named block schemes (NVFP4), with their derived constants.

A format is a frozen dataclass of *settings*; every derived number (bias, emax, max normal, NaN
code, value grid) is a property computed from them, so a format with other widths is consistent.
"""
from .element import (MX_FORMATS, ElementFormat, FloatFormat, IntFormat, SpecialValues, get_format,
                      known_formats)
from .scale import (BFLOAT16_SCALE, E8M0, E8M0_DTYPE, FLOAT32_SCALE, POWER_OF_TWO_RULES, REFERENCE_RULES,
                    SCALE_RULES, UE4M3, ExponentScale, FloatScale, ScaleFormat, ScaleKind, get_scale_format,
                    known_scale_formats, scale_format_from_record)
from .scale_setup import (OPS_SETTINGS, QUANTIZER_SETTINGS, ScaleSetupError, SettingNames, check_scale_setup,
                          default_scale_format)
from .scheme import NVFP4, BlockScheme, get_scheme, known_schemes

__all__ = ["SpecialValues", "IntFormat", "FloatFormat", "ElementFormat", "get_format", "known_formats", "MX_FORMATS",
           "ScaleKind", "ExponentScale", "FloatScale", "ScaleFormat", "E8M0", "UE4M3", "FLOAT32_SCALE",
           "BFLOAT16_SCALE", "get_scale_format", "known_scale_formats", "scale_format_from_record", "BlockScheme",
           "NVFP4", "get_scheme", "known_schemes", "E8M0_DTYPE", "POWER_OF_TWO_RULES", "REFERENCE_RULES", "SCALE_RULES",
           "ScaleSetupError", "SettingNames", "OPS_SETTINGS", "QUANTIZER_SETTINGS", "check_scale_setup",
           "default_scale_format"]
