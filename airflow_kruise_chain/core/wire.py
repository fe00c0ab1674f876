"""The stage runner's wire format, in one place: what the operator writes for the runner (the run spec in a
pod annotation) and what the runner prints back (marker lines). `runner.sh` implements the other side.

**Run spec** (annotation ``airflow-kruise-chain/<slot>.run``; the runner reads it as env ``KC_RUN`` at
container start and as the file ``/kruise-chain-meta/<slot>`` of a downwardAPI volume while it runs; deleted
once its generation has ended, by the next swap or a kept pod's teardown, and an absent annotation reads as
empty in both): sh text the runner sources, every value single-quoted (any bytes but NUL arrive unchanged:
quotes, ``$``, backslashes, newlines, trailing ones too, non-ASCII)::

    kc_g=7                     # generation (always the first line: the runner polls it)
    kc_nonce='3f2a...'         # the runner derives the generation's token from it and the pod's seal
    kc_s='transform'           # stage name
    kc_m=16384                 # outputs limit in bytes
    kc_r=0                     # 1: the swap patched the slot's image; only the restarted container runs it
    kc_p=5d1c...               # (a go into a prepared slot) the prepare whose container alone runs it
    kc_stage_env() {           # the stage's env
    export MODE='strict'
    :
    }
    kc_stage_argv() {          # the stage's argv: argv[0] as given, found on PATH unless it has a '/'
    kc_exec 'python3' '-c' 'print(1)'
    }

**Markers** (lines each starting with `MARKER` at the start of a line)::

    ::kruise-chain:: start gen=G token=T stage=S slot=X at=TS                        (stdout)
    ::kruise-chain:: stderr-start gen=G token=T stage=S                               (stderr)
    ::kruise-chain:: result gen=G token=T stage=S slot=X exit=N reason=R started=TS finished=TS
        outputs=BASE64|- outputs_status=ok|absent|too-big|truncated streams=2         (stdout)
    ::kruise-chain:: stderr-end gen=G token=T stage=S                                 (stderr)

A runtime copies stdout and stderr into the log by separate readers, so a line the stage wrote on one stream
may reach the log after a marker printed on the other. Each stream keeps its own order, so the runner marks
where the stage's output begins and ends on each stream, each line once (``kubectl logs`` shows each once):
the start and result lines on stdout, ``stderr-start`` and ``stderr-end`` on stderr. The stage's output
starts after the first of the two begin lines and is complete once the result line and ``stderr-end`` are
both in the log (`core.output.GenerationOutput`; ``streams=2``: the result line has a stream end to wait
for). Runners before this format printed the start and result lines on both streams: a second copy counts
as the other stream's begin or end. A result line without ``streams=2`` was printed once.

A result counts only for the generation and token the operator swapped in (`matches`): copies of earlier
output, lines a stage prints for another generation and lines of the other slot are ignored. **No stage
knows a token** (`sealed_token`): the chain pod has a seal (annotation ``airflow-kruise-chain/seal``, a
random secret), which the slots' runners get in env (``KC_SEAL``, resolved when the container starts: no
stage's env holds it, no volume shows it, and the runner is not dumpable), and the run spec carries a nonce,
from which the runner derives the token (the first 16 hex digits of the sha256 of ``"SEAL NONCE"``). A stage
runs as its runner's user and can read its slot's run spec, which is why the token is not in it: a stage
that printed a result line of its own (to end its task early and stay in the slot) or of the next
generation its slot is given meanwhile (it would read that run spec too) prints no token the operator
takes. Nothing prints a token while a stage runs: the begin lines (start, ``stderr-start``), printed before
the stage starts, carry `begin_token` of it (a one-way hash: a stage reading its own begin line off its
stdout pipe before the runtime does learns nothing to end a generation with), the result and end lines are
printed once the stage's processes are gone, and the slot's records and termination message of the
previous generation are emptied before the next stage starts. A run spec with ``kc_t='TOKEN'`` instead of a
nonce (an operator before seals; a pod without a seal) has its token on every line, readable by its stage.
The result line is also the slot's termination message (outputs left out above 4000 bytes). Records (in the
slot's own state volume):
``/kruise-chain-state/gen-G/{started,result,exit_code,outputs.json}`` (and the stage's captured output,
``gen-G/{stdout,stderr,capture}``: `core.fastgo.Capture`), and ``<slot>.serving`` (the runner
serves the slot: the startup probe's). The pod never says that a generation ended (a slot is Ready while its
runner serves it, running a stage too): its result line does.

**Stop** (annotation ``airflow-kruise-chain/<slot>.stop``, file ``/kruise-chain-meta/<slot>.stop``):
``"G GRACE"`` stops generation G if it runs: SIGTERM to the stage, SIGKILL to all of it after GRACE
seconds, result reason ``stopped``; the runner parks (no container restart, no ContainerRecreateRequest).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import math
import re
import secrets
import shlex
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

PREFIX = "airflow-kruise-chain/"
"""Prefix of every label and annotation the provider owns."""
MARKER = "::kruise-chain::"
"""Token that starts every line the runner prints about itself."""
MAX_OUTPUTS_BYTES = 16 * 1024
"""Hard cap on the size of a stage's declared outputs (``$CHAIN_OUTPUT``)."""

GENERATION_ANNOTATION = PREFIX + "generation"
"""the chain's latest generation (the swap counts generations per pod)"""
GENERATION_FIELD = "generation"
STAGE_FIELD = "stage"
RUN_FIELD = "run"
SLOT_FIELDS: tuple[str, ...] = (GENERATION_FIELD, STAGE_FIELD, RUN_FIELD)
"""Per-slot annotations ``airflow-kruise-chain/<slot>.<field>``: the slot's generation and stage, and the
runner's run spec."""
PREPARED_FIELD = "prepared"
"""Per-slot annotation ``airflow-kruise-chain/<slot>.prepared``: the slot's latest prepare
(`podview.PrepareRecord`); not one of `SLOT_FIELDS`: a swap leaves it in place."""
PREPARE_ID_FIELD = "prepare-id"
"""Per-slot annotation ``airflow-kruise-chain/<slot>.prepare-id``: a random id of the slot's latest prepare,
set with its image patch and left in place by swaps. The slot's container gets it in env (``KC_PREPARE``, a
``fieldRef`` the kubelet resolves when it creates the container, from the same pod object whose image it
starts), so a runner knows which prepare it was started for; a go into a prepared slot names it in the run
spec (``kc_p``), and a runner started for another (the old container, not killed yet) refuses it."""
PREPARE_ENV = "KC_PREPARE"


def slot_annotation(slot: str, field: str) -> str:
    """Key of the per-slot annotation `field` (one of `SLOT_FIELDS`)."""
    return f"{PREFIX}{slot}.{field}"


SEAL_ANNOTATION = PREFIX + "seal"
"""The chain pod's seal (`new_seal`, set when the pod is created, never changed): the slots' runners get it in
env (``KC_SEAL``) and derive each generation's token from it and the run spec's nonce (`sealed_token`)."""
SEAL_ENV = "KC_SEAL"

STAGES_ANNOTATION = PREFIX + "stages"
"""Every stage's latest swap record in one annotation: one line of compact JSON, stage name -> record
(`podview.StageRecord`), newest first (`podview.records_annotation`), so that ``kubectl describe`` of the pod
prints one shortened line for them whatever the number of stages, the newest stage's record first."""


def stage_annotation(stage: str) -> str:
    """Key of a stage's record annotation in the layout before `STAGES_ANNOTATION` (one annotation per stage):
    read from pods built by an earlier version (`podview.records_of`), deleted by the next write of the
    records."""
    return f"{PREFIX}stage.{stage}"


STOP_FIELD = "stop"
"""Per-slot annotation ``airflow-kruise-chain/<slot>.stop``: ``"GENERATION GRACE_SECONDS"`` asks the slot's
runner to stop that generation (SIGTERM, SIGKILL to all of it after the grace); not one of `SLOT_FIELDS`."""

REPLAY_FIELD = "replay"
"""Per-slot annotation ``airflow-kruise-chain/<slot>.replay``: ``"GENERATION NONCE"`` asks the slot's runner,
once parked on that generation, to print its result again from its records (the line may have been rotated
out of the slot's log); each new value is one request; not one of `SLOT_FIELDS`."""


def replay_request(slot: str, generation: int) -> tuple[str, str]:
    """The annotation (key, value) of a new replay request for `generation` in `slot`."""
    return slot_annotation(slot, REPLAY_FIELD), f"{generation} {time.time_ns():x}"


def replay_note(slot: str, generation: int, key: str) -> str:
    """The task log's line for a replay request."""
    return (
        f"::kruise-chain:: generation {generation} has printed nothing for a while: asked {slot}'s runner to "
        f"print its result again from its records once it has ended, should its line have been rotated out "
        f"of the log (annotation {key})"
    )


RUNNER_MOUNT = "/kruise-chain"
"""emptyDir of the runner: ``bin/`` (busybox, runner), written by the init container, read-only in the
slots."""
RUNNER_BIN = f"{RUNNER_MOUNT}/bin"
RUNNER_STATE = "/kruise-chain-state"
"""Each slot's own emptyDir (no other container mounts it): its runner's records."""
META_MOUNT = "/kruise-chain-meta"
"""Each slot's own downwardAPI volume: the files ``<slot>`` (its run spec annotation) and ``<slot>.stop``."""
RUNNER_COMMAND: tuple[str, ...] = (f"{RUNNER_BIN}/runner",)
"""The slots' command: the runner (`runner.sh`), run by the kernel through its `#!` line (its busybox)."""
DEFAULT_RUNNER_IMAGE = "busybox:1.37.0-musl"
"""the image of the chain pod's init container (`runnerinstall.py`): the official static busybox image, whose
shell checks and installs the runner from its ConfigMap and whose /bin/busybox the runner runs on"""

_START = re.compile(re.escape(MARKER) + r" (start|result|stderr-start|stderr-end)((?: [a-z_]+=\S*)+)\s*$")
_FRACTION = re.compile(r"\.(\d+)Z$")


def new_token() -> str:
    """A fresh per-generation token (or, in a sealed pod, the nonce it is derived from)."""
    return secrets.token_hex(8)


def new_seal() -> str:
    """A fresh chain pod seal (`SEAL_ANNOTATION`)."""
    return secrets.token_hex(16)


def _hex16(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def sealed_token(seal: str, nonce: str) -> str:
    """The token a runner holding `seal` derives from a run spec's `nonce` (`runner.sh` `kc_tokens`)."""
    return _hex16(f"{seal} {nonce}")


def begin_token(token: str) -> str:
    """What a sealed runner prints for `token` on a generation's begin lines (start, ``stderr-start``),
    which it prints before the stage starts: a one-way hash of it."""
    return _hex16(token)


def run_spec(
    *,
    generation: int,
    token: str,
    stage: str,
    argv: Sequence[str],
    env: Mapping[str, str],
    outputs_max: int,
    restart: bool = False,
    files: Mapping[str, str] | None = None,
    dirs: Sequence[str] = (),
    nonce: str | None = None,
    prepare: str = "",
) -> str:
    """The run spec annotation for one generation (names must be valid sh names, values without NUL).

    `nonce`: a sealed pod's generation (`token` is then `sealed_token(seal, nonce)`): the spec carries the
    nonce, never the token, which its stage can therefore not know.

    `restart`: the swap also patches the slot's image. The runner still in the slot (the old image) reads
    the spec from its volume before the kubelet stops it and must leave it to the restarted container, which
    gets it in env at its start.

    `files` (env NAME -> path of a mounted Secret or ConfigMap key) and `dirs` (mounted Secrets and ConfigMaps
    whose every key becomes env) name where the runner reads values: only those paths, never a value, are in
    the spec; `env` wins over `files`, `files` over `dirs` (a container's env over its envFrom).

    `prepare`: a go into a slot prepared ahead (`PREPARE_ID_FIELD`, hex): only a runner whose container was
    created for that prepare (env ``KC_PREPARE``) runs it; any other refuses it and records nothing."""
    exports = "".join(f"kc_env_dir {shlex.quote(path)}\n" for path in dirs)
    exports += "".join(f"kc_env_file {name} {shlex.quote(path)}\n" for name, path in (files or {}).items())
    exports += "".join(f"export {name}={shlex.quote(value)}\n" for name, value in env.items())
    words = " ".join(shlex.quote(word) for word in argv)
    secret = f"kc_nonce={shlex.quote(nonce)}" if nonce is not None else f"kc_t={shlex.quote(token)}"
    return (
        f"kc_g={int(generation)}\n"
        f"{secret}\n"
        f"kc_s={shlex.quote(stage)}\n"
        f"kc_m={int(outputs_max)}\n"
        f"kc_r={int(restart)}\n"
        + (f"kc_p={_hex_id(prepare)}\n" if prepare else "")
        + f"kc_stage_env() {{\n{exports}:\n}}\n"
        f"kc_stage_argv() {{\nkc_exec {words}\n}}\n"
    )


def is_prepare_id(text: str) -> bool:
    """Whether `text` is a prepare id (`PREPARE_ID_FIELD`): lowercase hex, not empty."""
    return bool(text) and all(c in "0123456789abcdef" for c in text)


def _hex_id(text: str) -> str:
    if not is_prepare_id(text):
        raise ValueError(f"a prepare id is lowercase hex, not {text!r}")
    return text


def names_prepare(spec: str) -> bool:
    """Whether a run spec names a prepare (``kc_p``, `run_spec`'s `prepare`): only the runner created for
    it runs it."""
    return "\nkc_p=" in spec


def run_spec_generation(text: str) -> int:
    """The generation of a run spec (0 when empty or malformed)."""
    first = text.split("\n", 1)[0]
    return int(first[5:]) if first.startswith("kc_g=") and first[5:].isdigit() else 0


@dataclass(frozen=True)
class StartMarker:
    """``::kruise-chain:: start gen=N token=T stage=NAME slot=S at=TS``."""

    generation: int
    stage: str
    slot: str
    at: datetime
    token: str = ""


@dataclass(frozen=True)
class ResultMarker:
    """``::kruise-chain:: result gen=N token=T ... outputs=B64|- outputs_status=S``.

    `outputs_status` is the runner's (``ok``, ``absent``, ``too-big``; ``truncated`` in a termination
    message, where the outputs are left to the log line) or ``invalid`` when the outputs are not a
    base64-encoded JSON object.
    """

    generation: int
    stage: str
    slot: str
    exit_code: int
    reason: str
    started_at: datetime
    finished_at: datetime
    outputs: dict[str, Any] | None
    outputs_status: str
    token: str = ""
    streams: int = 1
    """on how many of the container's streams the runner printed this line (2: stdout and stderr)"""


@dataclass(frozen=True)
class StreamMarker:
    """``::kruise-chain:: stderr-start|stderr-end gen=N token=T stage=NAME``: where the stage's output on
    stderr begins or ends (its start and result lines are on stdout)."""

    generation: int
    stage: str
    end: bool
    token: str = ""


Marker = StartMarker | ResultMarker | StreamMarker


def matches(marker: Marker | None, generation: int, token: str) -> bool:
    """Whether `marker` is the runner's for `generation` swapped in with `token` (an empty `token`, from a
    record written before tokens existed, matches on the generation alone). A begin line (start,
    ``stderr-start``) may carry `begin_token` of it instead (a sealed runner's)."""
    if marker is None or marker.generation != generation:
        return False
    if not token or marker.token == token:
        return True
    begin = isinstance(marker, StartMarker) or (isinstance(marker, StreamMarker) and not marker.end)
    return begin and marker.token == begin_token(token)


def _timestamp(text: str) -> datetime:
    """An RFC 3339 UTC time as the runner writes it, whole seconds or with up to nanoseconds."""
    fraction = _FRACTION.search(text)
    whole = text[: fraction.start()] if fraction else text.rstrip("Z")
    parsed = datetime.strptime(whole, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
    if fraction:
        parsed = parsed.replace(microsecond=int(fraction.group(1)[:6].ljust(6, "0")))
    return parsed


MAX_OUTPUTS_DEPTH = 32
"""Deepest nesting of arrays and objects accepted in a stage's outputs (the object itself is level 1)."""


def decode_outputs(encoded: str, status: str) -> tuple[dict[str, Any] | None, str]:
    if encoded == "-":
        return None, status or "absent"
    try:
        value = load_outputs(base64.b64decode(encoded, validate=True))
    except binascii.Error:
        value = None
    return (value, "ok") if value is not None else (None, "invalid")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} overflows a float")
    return value


def load_outputs(data: bytes) -> dict[str, Any] | None:
    """A stage's outputs as a JSON object XCom can carry, or None (outputs_status ``invalid``): not UTF-8
    JSON, not an object, NaN/Infinity (or a number that overflows to it), nested deeper than
    `MAX_OUTPUTS_DEPTH`, or a string holding a lone surrogate. Never raises for any input."""
    try:
        value = json.loads(data, parse_constant=_no_constant, parse_float=_finite)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict):
        return None
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return None
        elif isinstance(item, (dict, list)):
            if depth > MAX_OUTPUTS_DEPTH:
                return None
            children = [*item.keys(), *item.values()] if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return value


def parse_marker(line: str) -> Marker | None:
    """The runner marker `line` holds (the marker must start the line), else None."""
    match = _START.match(line)
    if match is None:
        return None
    fields = dict(item.split("=", 1) for item in match.group(2).split())
    try:
        generation = int(fields["gen"])
        token = fields.get("token", "")
        if match.group(1).startswith("stderr-"):
            return StreamMarker(generation, fields.get("stage", ""), match.group(1) == "stderr-end", token)
        if match.group(1) == "start":
            return StartMarker(generation, fields["stage"], fields["slot"], _timestamp(fields["at"]), token)
        outputs, outputs_status = decode_outputs(fields.get("outputs", "-"), fields.get("outputs_status", ""))
        return ResultMarker(
            generation=generation,
            stage=fields["stage"],
            slot=fields["slot"],
            exit_code=int(fields["exit"]),
            reason=fields.get("reason", ""),
            started_at=_timestamp(fields["started"]),
            finished_at=_timestamp(fields["finished"]),
            outputs=outputs,
            outputs_status=outputs_status,
            token=token,
            streams=2 if fields.get("streams") == "2" else 1,
        )
    except (KeyError, ValueError):
        return None
