"""A generation's own output, read back from its slot's log: for a try that adopts a finished generation.

A try that follows a running generation streams its output live; one that adopts a generation which ended
while no worker followed it (its worker died) prints it from here, so the task log of the try that delivers
the result holds the stage's whole output, from its start marker to its result line.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from .output import GenerationOutput
from .podview import ChainPod


def generation_output(lines: Iterable[str], generation: int) -> Iterator[str]:
    """The lines from `generation`'s start marker up to its result line, which comes last (none without the
    start marker), as a task log shows them (`GenerationOutput`: each marker once, though the runner prints
    it on both streams, and the output that reached the log between the two copies of the result line)."""
    output = GenerationOutput(generation, "", tail=0)
    for line in lines:
        yield from output.feed(line.rstrip("\n"))[1]
        if output.complete:
            break
    if output.started is not None and output.result is not None:
        yield output.result_line


def read_generation_output(api: Any, pod: ChainPod, namespace: str, slot: str, generation: int) -> list[str]:
    """`generation`'s output from `slot`'s current log, or its previous one (the slot restarted since).

    `api` is a `api.ChainApi`; empty when neither log holds the generation's start marker any more.
    """
    view = pod
    for previous in (False, True):
        if not previous and view.slot(slot).generation != generation:
            continue
        lines = list(
            generation_output(
                api.read_log(view.name, namespace, slot, previous=previous).splitlines(), generation
            )
        )
        if lines:
            return lines
    return []
