"""Quantities (k8s.io/apimachinery/pkg/api/resource)."""

from __future__ import annotations

import re
from decimal import ROUND_CEILING, Decimal, InvalidOperation
from typing import Any

QUANTITY_FORMAT_ERROR = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)
_QUANTITY_RE = re.compile(r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)\Z")
_NUMBER_RE = re.compile(r"^([+-]?)([0-9]*)(?:\.([0-9]*))?\Z")
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DECIMAL_SUFFIX = {v: k for k, v in _DECIMAL.items()}
_BINARY_SUFFIX = {v: k for k, v in _BINARY.items()}


def _parse_quantity(value: Any) -> tuple[Decimal, str]:
    if isinstance(value, bool):
        raise ValueError(QUANTITY_FORMAT_ERROR)
    if isinstance(value, int | float):
        value = repr(value) if isinstance(value, float) else str(value)
    if not isinstance(value, str):
        raise ValueError(QUANTITY_FORMAT_ERROR)
    text = value.strip()
    match = _QUANTITY_RE.match(text)
    if not match:
        raise ValueError(QUANTITY_FORMAT_ERROR)
    number, suffix = match.groups()
    parts = _NUMBER_RE.match(number)
    if not parts or not (parts.group(2) or parts.group(3)):
        raise ValueError(QUANTITY_FORMAT_ERROR)
    try:
        amount = Decimal(number)
    except InvalidOperation as exc:
        raise ValueError("unable to parse quantity's numeric part") from exc
    if suffix in _BINARY:
        return amount * (2 ** _BINARY[suffix]), "BinarySI"
    if suffix in _DECIMAL:
        return amount.scaleb(_DECIMAL[suffix]), "DecimalSI"
    if len(suffix) > 1 and suffix[0] in "eE" and re.fullmatch(r"[-+]?[0-9]+", suffix[1:]):
        return amount.scaleb(int(suffix[1:])), "DecimalExponent"
    raise ValueError("unable to parse quantity's suffix")


def parse_quantity(value: Any) -> Decimal:
    """The amount of a quantity (`100Mi`, `1G`, `500m`, `2`, `1e3`); raises ValueError with the real
    message."""
    return _parse_quantity(value)[0]


def _canonical_decimal(value: Decimal) -> tuple[int, int]:
    """(mantissa, exponent) with the exponent a multiple of 3 in [-9, 18] and the smallest mantissa."""
    nanos = (abs(value) * 10**9).to_integral_value(rounding=ROUND_CEILING)
    mantissa = int(nanos) * (-1 if value < 0 else 1)
    if mantissa == 0:
        return 0, 0
    exponent = -9
    while mantissa % 1000 == 0 and exponent < 18:
        mantissa //= 1000
        exponent += 3
    return mantissa, exponent


def format_quantity(value: Any, fmt: str | None = None) -> str:
    """The canonical form of a quantity, as `Quantity.String()` prints it (`1024Mi` -> `1Gi`, `0.5` ->
    `500m`).
    """
    if isinstance(value, Decimal):
        amount, fmt = value, fmt or "DecimalSI"
    else:
        amount, parsed_fmt = _parse_quantity(value)
        fmt = fmt or parsed_fmt
    if amount == 0:
        return "0"
    if fmt == "BinarySI":
        if -1024 < amount < 1024 or amount != amount.to_integral_value():
            fmt = "DecimalSI"
        else:
            mantissa, exponent = int(amount), 0
            while mantissa % 1024 == 0 and exponent < 60:
                mantissa //= 1024
                exponent += 10
            return f"{mantissa}{_BINARY_SUFFIX.get(exponent, '')}"
    mantissa, exponent = _canonical_decimal(amount)
    if fmt == "DecimalExponent":
        return f"{mantissa}e{exponent}" if exponent else str(mantissa)
    return f"{mantissa}{_DECIMAL_SUFFIX[exponent]}"


def cpu_millis(value: Any) -> int:
    """A CPU quantity in millicores, rounded up (`500m` -> 500, `2` -> 2000)."""
    return int((parse_quantity(value) * 1000).to_integral_value(rounding=ROUND_CEILING))


def memory_bytes(value: Any) -> int:
    """A memory quantity in bytes, rounded up (`100Mi` -> 104857600, `1G` -> 10**9)."""
    return int(parse_quantity(value).to_integral_value(rounding=ROUND_CEILING))
