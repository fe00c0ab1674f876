"""The fast go: a go's run spec delivered through `pods/exec` into the slot's runner as well.

The run spec annotation stays the durable record (what a restarted runner, a reattaching try and the UI read).
A go (a swap that changes only annotations: the slot holds the stage's image) is patched as always; then the
task (`start_go`: on a thread, while it follows the stage) execs the slot's runner (`runner --go LENGTH`,
the runner's own read-only busybox and script) with the same spec on stdin. `--go` writes it into the slot's
own state (`<slot>.go`, renamed into place: never read half-written) and wakes the runner. The runner takes
the newer generation of the two places and runs each generation once (its records: `gen-N/...`,
`<slot>.started`): the deliveries may come in any order, twice or not at all, and one older than the
runner's newest generation is ignored (an exec of a generation the annotation already started says so and
exits 0: the runner ends the stage's processes, not what the kubelet exec'd into its container). The exec
goes API server -> kubelet -> runtime: it does not wait for the pod's sync and the kubelet's downwardAPI
refresh (0.1-1.3 s on an idle node, seconds behind a busy sync, `DESIGN.md`).

Out of the stages' reach: the file lies in the slot's own state volume (the other slot does not mount it),
the runner reads it only while no stage process is left in its slot, and empties its state after each
generation (once the stage's processes are gone) and removes the file at its start, so a spec a stage
planted there is gone before the runner looks. Only a caller allowed `pods/exec` (`get` and `create`) can put
one there while the slot is parked. An exec refused (RBAC 403) or failed leaves the go to the annotation: the
task log says so once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol

from .swap import SwapPlan
from .wire import RUN_FIELD, RUNNER_BIN, slot_annotation

GO_COMMAND: tuple[str, ...] = (f"{RUNNER_BIN}/runner", "--go")
EXEC_TIMEOUT = 10.0
"""seconds an exec may take before the go is left to the annotation"""


class ExecApi(Protocol):
    """What the fast go needs from a Kubernetes client (`KruiseHook.exec_in_pod`)."""

    def exec_in_pod(
        self, name: str, namespace: str, container: str, command: list[str], stdin: bytes, timeout: float
    ) -> tuple[int, str]: ...


def go_spec(plan: SwapPlan) -> str | None:
    """The run spec a go plan's patch writes, or None for any other plan."""
    if plan.action != "go" or plan.patch is None:
        return None
    annotations = (plan.patch.get("metadata") or {}).get("annotations") or {}
    spec = annotations.get(slot_annotation(plan.slot, RUN_FIELD))
    return spec if isinstance(spec, str) else None


def deliver_go(api: ExecApi, plan: SwapPlan, log: Callable[[str], None]) -> bool:
    """Deliver a patched go's run spec through `pods/exec`; whether the runner took it in. Never raises:
    the annotation patched before carries the go on its own."""
    spec = go_spec(plan)
    if spec is None:
        return False
    data = spec.encode()
    command = [*GO_COMMAND, str(len(data))]
    try:
        code, output = api.exec_in_pod(plan.pod_name, plan.namespace, plan.slot, command, data, EXEC_TIMEOUT)
    except Exception as e:  # any failure: the annotation path carries the go
        why = "refused by RBAC" if getattr(e, "status", None) == 403 else "failed"
        log(
            f"::kruise-chain:: go via pods/exec {why} ({e}); generation {plan.generation} goes by its "
            "annotation"
        )
        return False
    if code == 0 and output.rstrip().endswith(": not taken"):
        log(
            f"::kruise-chain:: go via pods/exec not needed in {plan.slot}: generation {plan.generation} "
            "already started by its annotation"
        )
        return False
    if code != 0:
        # e.g. killed (137) after the runner's grace for exec'd processes at the end of a stage
        detail = output.strip().splitlines()[-1:] or [f"exit code {code}"]
        log(
            f"::kruise-chain:: go via pods/exec not taken in {plan.slot} ({detail[0]}); generation "
            f"{plan.generation} goes by its annotation"
        )
        return False
    return True


def start_go(api: ExecApi, plan: SwapPlan, log: Callable[[str], None]) -> Callable[[], None]:
    """`deliver_go` on a thread of its own, so that the task follows the stage (and prepares the idle slot)
    meanwhile; returns the wait for it (at most `EXEC_TIMEOUT` and a second), to call before the task
    defers or ends. `api` must make the exec on a client of its own (`KruiseHook.exec_in_pod` does)."""
    if go_spec(plan) is None:
        return lambda: None
    thread = threading.Thread(
        target=deliver_go, args=(api, plan, log), name="kruise-chain-fast-go", daemon=True
    )
    thread.start()
    return lambda: thread.join(EXEC_TIMEOUT + 1)
