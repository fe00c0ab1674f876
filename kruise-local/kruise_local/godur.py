"""Go's `time.Duration` as the kubelet prints it: `Duration.String()` (src/time/time.go `String`, `format`,
`fmtFrac`, `fmtInt`) and `Duration.Truncate`, on whole nanoseconds (a Go Duration is an int64 of them).

`String` writes a duration below one second in the smallest unit that keeps it whole at that precision
(`1ns`, `1.1µs`, `2.2ms`), `0s` for zero, and otherwise as hours, minutes and seconds with the seconds'
fraction (`3.3s`, `4m5s`, `1h0m0s`: the minutes are written once there are hours, the seconds once there are
minutes); a fraction has its trailing zeros and then its point dropped."""

from __future__ import annotations

NANOSECOND = 1
MICROSECOND = 1000 * NANOSECOND
MILLISECOND = 1000 * MICROSECOND
SECOND = 1000 * MILLISECOND
MINUTE = 60 * SECOND
HOUR = 60 * MINUTE

_MIN = -(1 << 63)
_MAX = (1 << 63) - 1


def seconds_to_duration(seconds: float) -> int:
    """A measured time in seconds (`loop.time()` differences) as a Go Duration: whole nanoseconds."""
    return max(_MIN, min(_MAX, round(seconds * SECOND)))


def truncate(d: int, m: int) -> int:
    """`Duration.Truncate(m)`: `d` rounded toward zero to a multiple of `m`; `d` itself if `m <= 0`."""
    if m <= 0:
        return d
    return d - int(abs(d) % m) * (1 if d >= 0 else -1)


def _frac(v: int, prec: int) -> tuple[str, int]:
    """`fmtFrac`: the fraction of v/10**prec (".12345", trailing zeros and then the point omitted), and
    v/10**prec."""
    digits = ""
    printed = False
    for _ in range(prec):
        digit = v % 10
        printed = printed or digit != 0
        if printed:
            digits = str(digit) + digits
        v //= 10
    return ("." + digits if printed else ""), v


def duration_string(d: int) -> str:
    """`Duration.String()` of `d` nanoseconds."""
    neg = d < 0
    u = -d if neg else d  # Go negates the uint64, which is exact for -1<<63 too
    if u < SECOND:
        if u == 0:
            return "0s"
        if u < MICROSECOND:
            prec, unit = 0, "ns"
        elif u < MILLISECOND:
            prec, unit = 3, "µs"  # U+00B5, as time.go writes it
        else:
            prec, unit = 6, "ms"
        frac, whole = _frac(u, prec)
        text = f"{whole}{frac}{unit}"
    else:
        frac, u = _frac(u, 9)  # u is now whole seconds
        text = f"{u % 60}{frac}s"
        u //= 60  # whole minutes
        if u > 0:
            text = f"{u % 60}m{text}"
            u //= 60  # whole hours
            if u > 0:
                text = f"{u}h{text}"
    return "-" + text if neg else text
