"""The provider's Airflow configuration options, section ``[kruise_chain]`` (see `get_provider_info`).

Imports Airflow only when an option is read, so `get_provider_info` stays cheap.
"""

from __future__ import annotations

from airflow_kruise_chain.core.wire import DEFAULT_RUNNER_IMAGE

SECTION = "kruise_chain"
DEFAULT_DASHBOARD_URL = (
    "http://localhost:8001/api/v1/namespaces/kubernetes-dashboard/services/https:kubernetes-dashboard:/proxy"
)
DEFAULT_MEMORY_SAMPLE_INTERVAL = 1.0
DEFAULT_MEMORY_SAMPLE_MAX_INTERVAL = 60.0
DEFAULT_SCALE_UP_WAIT = 30.0

OPTIONS: dict[str, dict[str, str | None]] = {
    "dashboard_url": {
        "description": "Where the 'Chain pod' extra link points. Either a URL template with {namespace} and "
        "{pod} (e.g. a Headlamp or Lens URL), or the base URL of a Kubernetes Dashboard, to which "
        "/#/pod/<namespace>/<pod>?namespace=<namespace> is appended. The default is the Kubernetes "
        "Dashboard through `kubectl proxy`.",
        "version_added": "0.1.0",
        "type": "string",
        "example": "https://k8s-dashboard.example.com",
        "default": DEFAULT_DASHBOARD_URL,
    },
    "ui_kubernetes_conn_id": {
        "description": "Kubernetes connection the API server uses to show a running chain's live pod (its "
        "slots and memory now) on the chain page; it needs get on pods and pods.metrics.k8s.io in the "
        "chains' namespaces. Empty (the default): the page shows only what the stage tasks recorded. Never a "
        "connection named by a DAG: DAG code does not choose the API server's credentials.",
        "version_added": "0.1.0",
        "type": "string",
        "example": "kubernetes_ui_readonly",
        "default": "",
    },
    "memory_sample_interval": {
        "description": "Seconds from a stage's start to the first read of the chain pod's metrics.k8s.io "
        "PodMetrics, for the stage's peak memory (needs a metrics server and `get` on "
        "pods.metrics.k8s.io); each later gap is twice the last, up to memory_sample_max_interval, no "
        "read comes before the metrics server can have a newer sample (the last one's timestamp + window, "
        "i.e. its --metric-resolution), and one more read at the stage's end if it can. A stage of T "
        "seconds makes at most 1 + ceil(log2(max / interval)) + floor(T / max) reads. The peak is the "
        "largest working set among the samples taken while the stage ran: a spike shorter than the gaps "
        "can be missed. 0 turns sampling off.",
        "version_added": "0.1.0",
        "type": "float",
        "example": "0.5",
        "default": str(DEFAULT_MEMORY_SAMPLE_INTERVAL),
    },
    "memory_sample_max_interval": {
        "description": "The longest gap, in seconds, between two metrics reads of a running stage (see "
        "memory_sample_interval): a long stage costs one read per this many seconds. Never below "
        "memory_sample_interval.",
        "version_added": "0.1.0",
        "type": "float",
        "example": "30",
        "default": str(DEFAULT_MEMORY_SAMPLE_MAX_INTERVAL),
    },
    "runner_image": {
        "description": "Image of the chain pod's init container that installs the stage runner: the "
        "official static busybox image, or a copy of it in a registry your nodes can pull from (the one "
        "option to set when you mirror images). Its shell checks the runner script, which the chain's "
        "setup keeps in a ConfigMap of the chain's namespace, against the sum in the pod spec, and copies "
        "it and the image's /bin/busybox into the pod; the stages run on that busybox, so it must be "
        "statically linked. A chain's own `runner_image` option wins.",
        "version_added": "0.1.0",
        "type": "string",
        "example": "registry.example.com/mirror/busybox:1.37.0-musl",
        "default": DEFAULT_RUNNER_IMAGE,
    },
    "scale_up_wait": {
        "description": "Seconds a chain pod that no node can take (the scheduler's FailedScheduling) waits "
        "for a cluster autoscaler to announce a node for it (its TriggeredScaleUp event) before the setup "
        "fails, naming the scheduler's reason. After a TriggeredScaleUp the setup waits for the node up to "
        "its startup_timeout; a NotTriggerScaleUp event (the autoscaler adds no node) fails it at once.",
        "version_added": "0.1.0",
        "type": "float",
        "example": "120",
        "default": str(DEFAULT_SCALE_UP_WAIT),
    },
}


def default_deferrable() -> bool:
    """Airflow's ``[operators] default_deferrable`` (env ``AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE``): the
    default of every deferrable operator's `deferrable`, read as KubernetesPodOperator reads it."""
    from airflow.providers.common.compat.sdk import conf

    return conf.getboolean("operators", "default_deferrable", fallback=False)


def runner_image() -> str:
    """``[kruise_chain] runner_image`` (env ``AIRFLOW__KRUISE_CHAIN__RUNNER_IMAGE``)."""
    from airflow.providers.common.compat.sdk import conf

    return conf.get(SECTION, "runner_image", fallback=DEFAULT_RUNNER_IMAGE) or DEFAULT_RUNNER_IMAGE


def dashboard_url() -> str:
    """``[kruise_chain] dashboard_url`` (env ``AIRFLOW__KRUISE_CHAIN__DASHBOARD_URL``)."""
    from airflow.providers.common.compat.sdk import conf

    return conf.get(SECTION, "dashboard_url", fallback=DEFAULT_DASHBOARD_URL) or DEFAULT_DASHBOARD_URL


def ui_kubernetes_conn_id() -> str:
    """``[kruise_chain] ui_kubernetes_conn_id`` ("" when the chain page reads no live pod)."""
    from airflow.providers.common.compat.sdk import conf

    return conf.get(SECTION, "ui_kubernetes_conn_id", fallback="") or ""


def memory_sample_interval() -> float:
    """``[kruise_chain] memory_sample_interval`` in seconds (0: no sampling)."""
    from airflow.providers.common.compat.sdk import conf

    return max(0.0, conf.getfloat(SECTION, "memory_sample_interval", fallback=DEFAULT_MEMORY_SAMPLE_INTERVAL))


def scale_up_wait() -> float:
    """``[kruise_chain] scale_up_wait``: seconds an unschedulable chain pod waits for a scale-up."""
    from airflow.providers.common.compat.sdk import conf

    return max(0.0, conf.getfloat(SECTION, "scale_up_wait", fallback=DEFAULT_SCALE_UP_WAIT))


def memory_sample_max_interval() -> float:
    """``[kruise_chain] memory_sample_max_interval`` in seconds (the longest gap between two reads)."""
    from airflow.providers.common.compat.sdk import conf

    return max(
        0.0,
        conf.getfloat(SECTION, "memory_sample_max_interval", fallback=DEFAULT_MEMORY_SAMPLE_MAX_INTERVAL),
    )


DEFER_EXIT_MARGIN = 3.0
"""Seconds allowed, past the supervisor's wake-up interval, for the executor's event of a deferral's exit to
reach the scheduler (see `defer_exit_hold`)."""


def defer_exit_hold() -> float:
    """Seconds from a deferral until its trigger may fire: Airflow's ``[workers] min_heartbeat_interval`` (the
    task supervisor notices the deferring task's exit up to that late) + `DEFER_EXIT_MARGIN`.

    Airflow 3.3 fails a deferred task whose trigger fired and whose resumed try was queued before the
    scheduler read the executor's (late) success event of the deferral's exit (apache/airflow#72716:
    `process_executor_events` spares only a SCHEDULED task instance, not a QUEUED or RUNNING one); a retry
    does not help, as the resumed try, still queued in the executor, runs next to it. An event that comes
    while the task instance is still DEFERRED is harmless."""
    from airflow.providers.common.compat.sdk import conf

    return max(0.0, conf.getfloat("workers", "min_heartbeat_interval", fallback=5.0)) + DEFER_EXIT_MARGIN
