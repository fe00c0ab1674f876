"""A generation's own output, read back from its slot's log: for a try that adopts a finished generation.

A try that follows a running generation streams its output live; one that adopts a generation which ended
while no worker followed it (its worker died) prints it from here, so the task log of the try that delivers
the result holds the stage's whole output, from its start marker to its result line.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from .podview import Pod, slot_generation
from .status import ResultMarker, StartMarker, parse_marker


def generation_output(lines: Iterable[str], generation: int) -> Iterator[str]:
    """The lines from `generation`'s start marker up to and including its result line (none without it)."""
    inside = False
    for line in lines:
        marker = parse_marker(line)
        if isinstance(marker, StartMarker) and marker.generation == generation:
            inside = True
        if inside:
            yield line.rstrip("\n")
        if inside and isinstance(marker, ResultMarker) and marker.generation == generation:
            return


def read_generation_output(api: Any, pod: Pod, namespace: str, slot: str, generation: int) -> list[str]:
    """`generation`'s output from `slot`'s current log, or its previous one (the slot restarted since).

    `api` is a `driver.ChainApi`; empty when neither log holds the generation's start marker any more.
    """
    name = (pod.get("metadata") or {}).get("name") or ""
    for previous in (False, True):
        if not previous and slot_generation(pod, slot) != generation:
            continue
        lines = list(
            generation_output(api.read_log(name, namespace, slot, previous=previous).splitlines(), generation)
        )
        if lines:
            return lines
    return []
