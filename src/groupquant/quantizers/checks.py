"""Small checks of plain setting values; each failure is a ConfigError naming the setting."""
from __future__ import annotations

from typing import Optional

from ..inject import ConfigError

__all__ = ["check_int", "check_bool", "check_optional_int", "check_number"]


def check_int(setting: str, given: object, low: Optional[int] = None, high: Optional[int] = None) -> int:
    """``given`` as an int in [low, high] (bools refused)."""
    if isinstance(given, bool) or not isinstance(given, int):
        raise ConfigError(setting, f"must be an integer, got {given!r}")
    if low is not None and given < low:
        raise ConfigError(setting, f"must be >= {low}, got {given}")
    if high is not None and given > high:
        raise ConfigError(setting, f"must be <= {high}, got {given}")
    return given


def check_optional_int(setting: str, given: object) -> Optional[int]:
    """``given`` as an int, or None."""
    return None if given is None else check_int(setting, given)


def check_bool(setting: str, given: object) -> bool:
    """``given`` as a bool (True/False only)."""
    if not isinstance(given, bool):
        raise ConfigError(setting, f"must be True or False, got {given!r}")
    return given


def check_number(setting: str, given: object, low: float, high: float, low_open: bool = True) -> float:
    """``given`` as a float in (low, high] (or [low, high] with ``low_open=False``)."""
    if isinstance(given, bool) or not isinstance(given, (int, float)):
        raise ConfigError(setting, f"must be a number, got {given!r}")
    value = float(given)
    above = value > low if low_open else value >= low
    if not (above and value <= high):
        bracket = "(" if low_open else "["
        raise ConfigError(setting, f"must be in {bracket}{low}, {high}], got {given!r}")
    return value
