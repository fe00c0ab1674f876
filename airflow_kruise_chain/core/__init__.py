"""The provider's core: chain specs, pod manifests, swap planning and status reading.

Knows Kubernetes and OpenKruise, nothing of Airflow. Objects are plain dicts in API JSON form.

Importing this package loads nothing but this file: each name is loaded from its module on first use
(PEP 562), so a DAG file that needs only the specs does not load the swap planner, driver and status readers
when every task process parses it.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "CHAIN_LABEL": "constants",
    "DAG_ID_LABEL": "constants",
    "GENERATION_ANNOTATION": "wire",
    "MANAGED_BY": "constants",
    "MANAGED_BY_LABEL": "constants",
    "MARKER": "wire",
    "MAX_OUTPUTS_BYTES": "wire",
    "PREFIX": "wire",
    "RUN_ID_LABEL": "constants",
    "SCRATCH_MOUNT": "constants",
    "SLOTS": "constants",
    "STAGES_ANNOTATION": "wire",
    "slot_annotation": "wire",
    "stage_annotation": "wire",
    "ChainConfigError": "errors",
    "ChainError": "errors",
    "PodLostError": "errors",
    "SlotBusyError": "errors",
    "ConflictError": "errors",
    "ResizeInfeasibleError": "errors",
    "ResizeRefusedError": "errors",
    "ResizeTimeoutError": "errors",
    "MalformedTrack": "errors",
    "ResizeUnsupportedError": "errors",
    "ResultUnavailableError": "errors",
    "PodStartError": "errors",
    "StageStartError": "errors",
    "StageTimeoutError": "errors",
    "ImageReference": "image",
    "parse_image_reference": "image",
    "build_chain_pod": "manifest",
    "chain_labels": "manifest",
    "chain_selector": "manifest",
    "label_value": "manifest",
    "pod_name_for": "manifest",
    "runner_script": "runnerinstall",
    "ChainPod": "podview",
    "StageRecord": "podview",
    "ChainSpec": "spec",
    "StageSpec": "spec",
    "effective_pull_policy": "spec",
    "parse_quantity": "resources",
    "Outcome": "kruise",
    "ResultMarker": "status",
    "StageResult": "status",
    "StageState": "status",
    "StageStatus": "status",
    "StartMarker": "status",
    "image_pull_job_outcome": "kruise",
    "parse_marker": "status",
    "slot_status": "status",
    "stage_state": "status",
    "stage_status": "status",
    "SwapPlan": "swap",
    "build_image_pull_job": "kruise",
    "image_pull_job_name": "kruise",
    "plan_swap": "swap",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
