"""Admission for the local API server: defaulting and validation as pure functions over dicts.

Core objects follow the Kubernetes API server (`pkg/apis/core/validation`, `pkg/apis/core/v1/defaults.go`, the
DefaultTolerationSeconds admission plugin, the pod strategy); OpenKruise objects follow the v1.9.0 webhooks.
Messages and cause reasons are the real ones:

- `validate_*` raise `ApiError` 422 `Invalid` carrying every cause, as `Kind "name" is invalid: field:
  message`;
- a Kruise webhook denial is an `ApiError` with the webhook's HTTP code and the message `admission webhook
  "<name>" denied the request: <detail>`. Like the real API server relaying a controller-runtime
  `admission.Errored()` answer, its Status `reason` is empty (only `admission.Denied()` answers carry
  `Forbidden`);
- a value the real server could not even decode (an unparseable quantity) raises 400 `BadRequest`.

Field errors are dicts `{"reason", "message", "field"}` (see `required`, `invalid_value`, ...). Functions that
default and then validate work on a copy and write it back only when the object is accepted.
"""

from __future__ import annotations

from kruise_local.imageref import ImageReference, parse_image_reference

from .decode import check_decodable
from .fields import (
    MAX_INT32,
    Cause,
    duplicate,
    forbidden,
    invalid_value,
    not_found_value,
    not_supported,
    required,
    too_long,
)
from .kruise import (
    CRR_ACTIVE_LABEL,
    CRR_NODE_NAME_LABEL,
    CRR_POD_UID_LABEL,
    CRR_UNREADY_ACQUIRED_ANNOTATION,
    CRR_WEBHOOK,
    IMAGE_PULL_JOB_MUTATING_WEBHOOK,
    IMAGE_PULL_JOB_WEBHOOK,
    NODE_IMAGE_WEBHOOK,
    PROTECTION_FINALIZER,
    admit_crr,
    admit_image_pull_job,
    admit_node_image,
    mutate_image_pull_job,
    validate_crr_update,
    validate_image_pull_job,
    validate_image_pull_job_update,
    webhook_denial,
)
from .meta import TOTAL_ANNOTATION_SIZE_LIMIT, validate_metadata, validate_metadata_update
from .names import is_dns1123_label, is_dns1123_subdomain
from .objects import (
    MAX_CONFIG_MAP_SIZE,
    convert_secret,
    default_event,
    default_namespace,
    default_node,
    default_secret,
    validate_configmap,
    validate_configmap_update,
    validate_event,
    validate_namespace,
    validate_node,
    validate_secret,
    validate_secret_update,
)
from .pod_defaults import DEFAULT_TOLERATION_SECONDS, default_pod, pod_qos_class
from .pod_resize import prepare_pod_resize, validate_pod_resize
from .pod_spec import POD_UPDATE_FORBIDDEN, validate_pod_create
from .pod_update import validate_pod_update
from .quantity import QUANTITY_FORMAT_ERROR, cpu_millis, format_quantity, memory_bytes, parse_quantity

__all__ = [
    "CRR_ACTIVE_LABEL",
    "CRR_NODE_NAME_LABEL",
    "CRR_POD_UID_LABEL",
    "CRR_UNREADY_ACQUIRED_ANNOTATION",
    "CRR_WEBHOOK",
    "DEFAULT_TOLERATION_SECONDS",
    "IMAGE_PULL_JOB_MUTATING_WEBHOOK",
    "IMAGE_PULL_JOB_WEBHOOK",
    "MAX_CONFIG_MAP_SIZE",
    "MAX_INT32",
    "NODE_IMAGE_WEBHOOK",
    "POD_UPDATE_FORBIDDEN",
    "PROTECTION_FINALIZER",
    "QUANTITY_FORMAT_ERROR",
    "TOTAL_ANNOTATION_SIZE_LIMIT",
    "Cause",
    "ImageReference",
    "admit_crr",
    "admit_image_pull_job",
    "admit_node_image",
    "check_decodable",
    "convert_secret",
    "cpu_millis",
    "default_event",
    "default_namespace",
    "default_node",
    "default_pod",
    "default_secret",
    "duplicate",
    "forbidden",
    "format_quantity",
    "invalid_value",
    "is_dns1123_label",
    "is_dns1123_subdomain",
    "memory_bytes",
    "mutate_image_pull_job",
    "not_found_value",
    "not_supported",
    "parse_image_reference",
    "parse_quantity",
    "pod_qos_class",
    "prepare_pod_resize",
    "required",
    "too_long",
    "validate_configmap",
    "validate_configmap_update",
    "validate_crr_update",
    "validate_event",
    "validate_image_pull_job",
    "validate_image_pull_job_update",
    "validate_metadata",
    "validate_metadata_update",
    "validate_namespace",
    "validate_node",
    "validate_pod_create",
    "validate_pod_resize",
    "validate_pod_update",
    "validate_secret",
    "validate_secret_update",
    "webhook_denial",
]
