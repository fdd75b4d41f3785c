"""The solver that resolves scale sharing: ``scaling_per_output`` (TENSOR / CHANNEL / GROUP),
mapping the older boolean ``scaling_per_output_channel`` onto it with a DeprecationWarning."""
from __future__ import annotations

import warnings
from typing import Optional

from ..inject import ConfigError
from .checks import check_int
from .settings import ScalingPerOutput, coerce

__all__ = ["granularity"]


def granularity(scaling_per_output: object, group_size: Optional[int],
                scaling_per_output_channel: Optional[bool] = None) -> ScalingPerOutput:
    """The resolved scale sharing; checks ``group_size`` against it.

    ``scaling_per_output_channel=True/False`` (deprecated) wins when given, as CHANNEL/TENSOR.
    """
    if scaling_per_output_channel is not None:
        if not isinstance(scaling_per_output_channel, bool):
            raise ConfigError("scaling_per_output_channel",
                              f"must be True, False or None, got {scaling_per_output_channel!r}")
        warnings.warn("scaling_per_output_channel is deprecated: use scaling_per_output=ScalingPerOutput.CHANNEL "
                      "(True) or ScalingPerOutput.TENSOR (False)", DeprecationWarning, stacklevel=2)
        resolved = ScalingPerOutput.CHANNEL if scaling_per_output_channel else ScalingPerOutput.TENSOR
    else:
        resolved = coerce("scaling_per_output", scaling_per_output, ScalingPerOutput)
    if resolved is ScalingPerOutput.GROUP:
        if group_size is None:
            raise ConfigError("group_size", "scaling_per_output=GROUP needs a group_size (e.g. 32)")
        check_int("group_size", group_size, 1)
    elif group_size is not None:
        raise ConfigError("group_size", f"group_size={group_size!r} is set but scaling is per "
                                        f"{resolved.value}: set scaling_per_output=ScalingPerOutput.GROUP "
                                        "to scale per group, or group_size=None")
    return resolved
