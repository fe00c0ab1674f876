"""The provider's core: chain specs, pod manifests, swap planning and status reading.

Knows Kubernetes and OpenKruise, nothing of Airflow. Objects are plain dicts in API JSON form.
"""

from __future__ import annotations

from .constants import (
    CHAIN_LABEL,
    DAG_ID_LABEL,
    GENERATION_ANNOTATION,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    MARKER,
    MAX_OUTPUTS_BYTES,
    PREFIX,
    RUN_ID_LABEL,
    SCRATCH_MOUNT,
    SLOTS,
    slot_annotation,
    stage_annotation,
)
from .errors import ChainConfigError, ChainError, PodLostError, SlotBusyError
from .image import ImageReference, parse_image_reference
from .manifest import (
    build_chain_pod,
    build_runner_configmap,
    chain_labels,
    chain_selector,
    label_value,
    pod_name_for,
    runner_configmap_name,
    runner_script,
)
from .podview import StageRecord, stage_record
from .spec import ChainSpec, StageSpec, effective_pull_policy, parse_quantity
from .status import (
    Outcome,
    ResultMarker,
    StageResult,
    StageState,
    StageStatus,
    StartMarker,
    crr_outcome,
    image_pull_job_outcome,
    parse_marker,
    slot_status,
    stage_state,
    stage_status,
)
from .swap import SwapPlan, build_image_pull_job, image_pull_job_name, plan_swap

__all__ = [
    "CHAIN_LABEL",
    "DAG_ID_LABEL",
    "GENERATION_ANNOTATION",
    "MANAGED_BY",
    "MANAGED_BY_LABEL",
    "MARKER",
    "MAX_OUTPUTS_BYTES",
    "PREFIX",
    "RUN_ID_LABEL",
    "SCRATCH_MOUNT",
    "SLOTS",
    "ChainConfigError",
    "ChainError",
    "ChainSpec",
    "ImageReference",
    "Outcome",
    "PodLostError",
    "ResultMarker",
    "SlotBusyError",
    "StageRecord",
    "StageResult",
    "StageSpec",
    "StageState",
    "StageStatus",
    "StartMarker",
    "SwapPlan",
    "build_chain_pod",
    "build_image_pull_job",
    "build_runner_configmap",
    "chain_labels",
    "chain_selector",
    "crr_outcome",
    "effective_pull_policy",
    "image_pull_job_name",
    "image_pull_job_outcome",
    "label_value",
    "parse_image_reference",
    "parse_marker",
    "parse_quantity",
    "plan_swap",
    "pod_name_for",
    "runner_configmap_name",
    "runner_script",
    "slot_annotation",
    "slot_status",
    "stage_annotation",
    "stage_record",
    "stage_state",
    "stage_status",
]
