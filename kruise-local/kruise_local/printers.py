"""Server-side Table output (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`) for `kubectl get`.

Built-in kinds get the columns and cells of kube's printers (`pkg/printers/internalversion/printers.go`:
`AddHandlers`' column definitions, `printPod`, `printNode`, `printEvent`, `printNamespace`, `printConfigMap`),
generated as the API server's table convertor does it (`Wide: true`: every column, kubectl hides priority > 0
without `-o wide`). Kruise kinds get their CRD's `additionalPrinterColumns` evaluated as apiextensions'
`tableconvertor` does (simple JSONPath, `cellForJSONValue`, `date` as a human-readable age).
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

from . import resources as R
from .errors import ApiError
from .openapi import crd_version
from .resources import Resource

Obj = dict[str, Any]

_NAME_DOC = (
    "Name must be unique within a namespace. Is required when creating resources, although some resources "
    "may allow a client to request the generation of an appropriate name automatically. Name is primarily "
    "intended for creation idempotence and configuration definition. Cannot be updated. More info: "
    "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"
)
_AGE_DOC = (
    "CreationTimestamp is a timestamp representing the server time when this object was created. It is "
    "not guaranteed to be set in happens-before order across separate operations. Clients may not set this "
    "value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. "
    "Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"
)


def _col(name: str, kind: str = "string", priority: int = 0, description: str = "", fmt: str = "") -> Obj:
    return {"name": name, "type": kind, "format": fmt, "description": description, "priority": priority}


_NAME = _col("Name", fmt="name", description=_NAME_DOC)
_AGE = _col("Age", description=_AGE_DOC)
_CREATED_DOC = (
    "CreationTimestamp is a timestamp representing the server time when this object was created. It is "
    "not guaranteed to be set in happens-before order across separate operations. Clients may not set this "
    "value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null "
    "for lists. "
    "More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"
)
_BINDING_COLUMNS = [
    _NAME,
    _col("Role", description="RoleRef can reference a Role in the current namespace or a ClusterRole in the "
         "global namespace. If the RoleRef cannot be resolved, the Authorizer must return an error."),
    _AGE,
    _col("Users", priority=1, description="Users in the roleBinding"),
    _col("Groups", priority=1, description="Groups in the roleBinding"),
    _col("ServiceAccounts", priority=1, description="ServiceAccounts in the roleBinding"),
]  # fmt: skip
COLUMNS: dict[str, list[Obj]] = {
    "Pod": [
        _NAME,
        _col("Ready", description="The aggregate readiness state of this pod for accepting traffic."),
        _col("Status", description="The aggregate status of the containers in this pod."),
        _col(
            "Restarts",
            description="The number of times the containers in this pod have been restarted and when the "
            "last container in this pod has restarted.",
        ),
        _AGE,
        _col("IP", priority=1, description="podIP address allocated to the pod."),
        _col("Node", priority=1, description="NodeName indicates in which node this pod is scheduled."),
        _col(
            "Nominated Node", priority=1, description="nominatedNodeName is set only when this pod preempts."
        ),
        _col(
            "Readiness Gates", priority=1, description="If specified, all readiness gates will be evaluated."
        ),
    ],
    "Namespace": [_NAME, _col("Status", description="The status of the namespace"), _AGE],
    "ConfigMap": [_NAME, _col("Data", description="Data contains the configuration data."), _AGE],
    "Secret": [
        _NAME,
        _col("Type", description="Used to facilitate programmatic handling of secret data."),
        _col("Data", description="Data contains the secret data."),
        _AGE,
    ],
    "ServiceAccount": [
        _NAME,
        _col(
            "Secrets",
            description="Secrets is a list of the secrets in the same namespace that pods running using "
            "this ServiceAccount are allowed to use.",
        ),
        _AGE,
    ],
    "ValidatingAdmissionPolicy": [
        _NAME,
        _col(
            "Validations",
            "integer",
            description="Validations contain CEL expressions which is used to apply the validation.",
        ),
        _col(
            "ParamKind",
            description="ParamKind specifies the kind of resources used to parameterize this policy",
        ),
        _AGE,
    ],
    "ValidatingAdmissionPolicyBinding": [
        _NAME,
        _col(
            "PolicyName",
            description="PolicyName references a ValidatingAdmissionPolicy name which the "
            "ValidatingAdmissionPolicyBinding binds to.",
        ),
        _col(
            "ParamRef",
            description="ParamRef specifies the parameter resource used to configure the admission control "
            "policy.",
        ),
        _AGE,
    ],
    # pkg/printers/internalversion/printers.go `roleColumnDefinitions`, `roleBindingsColumnDefinitions`
    "Role": [_NAME, _col("Created At", "date", description=_CREATED_DOC)],
    "ClusterRole": [_NAME, _col("Created At", "date", description=_CREATED_DOC)],
    "RoleBinding": _BINDING_COLUMNS,
    "ClusterRoleBinding": _BINDING_COLUMNS,
    "Node": [
        _NAME,
        _col("Status", description="The status of the node"),
        _col("Roles", description="The roles of the node"),
        _AGE,
        _col("Version", description="Kubelet Version reported by the node."),
        _col("Internal-IP", priority=1, description="List of addresses reachable to the node."),
        _col("External-IP", priority=1, description="List of addresses reachable to the node."),
        _col("OS-Image", priority=1, description="OS Image reported by the node."),
        _col("Kernel-Version", priority=1, description="Kernel Version reported by the node."),
        _col("Container-Runtime", priority=1, description="ContainerRuntime Version reported by the node."),
    ],
    "Event": [
        _col(
            "Last Seen",
            description="The time at which the most recent occurrence of this event was recorded.",
        ),
        _col(
            "Type", description="Type of this event (Normal, Warning), new types could be added in the future"
        ),
        _col("Reason", description="This should be a short, machine understandable string."),
        _col("Object", description="The object that this event is about."),
        _col("Subobject", priority=1, description="The field of the object the event is about."),
        _col("Source", priority=1, description="The component reporting this event."),
        _col("Message", description="A human-readable description of the status of this operation."),
        _col("First Seen", priority=1, description="The time at which the event was first recorded."),
        _col("Count", priority=1, description="The number of times this event has occurred."),
        _col("Name", priority=1, fmt="name", description=_NAME_DOC),
    ],
}


def human_duration(seconds: float) -> str:
    """apimachinery `duration.HumanDuration`."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        rest = s % 60
        return f"{minutes}m" if rest == 0 else f"{minutes}m{rest}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h" if rest == 0 else f"{hours}h{rest}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest = hours % 24
        return f"{hours // 24}d" if rest == 0 else f"{hours // 24}d{rest}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if days == 0 else f"{hours // 24 // 365}y{days}d"
    return f"{hours // 24 // 365}y"


def _parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def since(value: Any) -> str:
    """`translateTimestampSince`: `<unknown>` for no time, else the age."""
    when = _parse_time(value)
    if when is None:
        return "<unknown>"
    return human_duration((datetime.now(UTC) - when).total_seconds())


# -- built-in printers --------------------------------------------------------------------------------------
def _restartable(container: Obj | None) -> bool:
    return bool(container) and container.get("restartPolicy") == "Always"


def _condition_true(status: Obj, kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True" for c in status.get("conditions") or [])


def print_pod(pod: Obj) -> tuple[list[Any], list[Obj]]:
    """`printPod`: NAME READY STATUS RESTARTS AGE, IP NODE NOMINATED-NODE READINESS-GATES."""
    spec, status, meta = pod.get("spec") or {}, pod.get("status") or {}, pod.get("metadata") or {}
    init_specs = {c.get("name"): c for c in spec.get("initContainers") or []}
    total = len(spec.get("containers") or []) + sum(_restartable(c) for c in init_specs.values())
    ready = restarts = sidecar_restarts = 0
    last_restart: datetime | None = None
    last_sidecar_restart: datetime | None = None
    phase = status.get("phase") or ""
    reason = status.get("reason") or phase
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("reason") == "SchedulingGated":
            reason = "SchedulingGated"
    conditions: list[Obj] = []
    if phase == "Succeeded":
        conditions = [_row_condition("Succeeded", "The pod has completed successfully.")]
    elif phase == "Failed":
        conditions = [_row_condition("Failed", "The pod failed.")]

    def finished(cs: Obj) -> datetime | None:
        return _parse_time(((cs.get("lastState") or {}).get("terminated") or {}).get("finishedAt"))

    initializing = False
    init_statuses = status.get("initContainerStatuses") or []
    for i, cs in enumerate(init_statuses):
        restarts += int(cs.get("restartCount") or 0)
        done = finished(cs)
        if done and (last_restart is None or done > last_restart):
            last_restart = done
        sidecar = _restartable(init_specs.get(cs.get("name")))
        if sidecar:
            sidecar_restarts += int(cs.get("restartCount") or 0)
            if done and (last_sidecar_restart is None or done > last_sidecar_restart):
                last_sidecar_restart = done
        state = cs.get("state") or {}
        term, wait = state.get("terminated"), state.get("waiting")
        if term is not None and term.get("exitCode", 0) == 0:
            continue
        if sidecar and cs.get("started"):
            ready += bool(cs.get("ready"))
            continue
        if term is not None:
            if term.get("reason"):
                reason = "Init:" + term["reason"]
            elif term.get("signal"):
                reason = f"Init:Signal:{term['signal']}"
            else:
                reason = f"Init:ExitCode:{term.get('exitCode', 0)}"
        elif wait is not None and wait.get("reason") and wait.get("reason") != "PodInitializing":
            reason = "Init:" + wait["reason"]
        else:
            reason = f"Init:{i}/{len(init_specs)}"
        initializing = True
        break
    if not initializing or _condition_true(status, "Initialized"):
        restarts, last_restart = sidecar_restarts, last_sidecar_restart
        running = False
        for cs in reversed(status.get("containerStatuses") or []):
            restarts += int(cs.get("restartCount") or 0)
            done = finished(cs)
            if done and (last_restart is None or done > last_restart):
                last_restart = done
            state = cs.get("state") or {}
            term, wait = state.get("terminated"), state.get("waiting")
            if wait is not None and wait.get("reason"):
                reason = wait["reason"]
            elif term is not None and term.get("reason"):
                reason = term["reason"]
            elif term is not None:
                reason = (
                    f"Signal:{term['signal']}"
                    if term.get("signal")
                    else f"ExitCode:{term.get('exitCode', 0)}"
                )
            elif cs.get("ready") and state.get("running") is not None:
                running = True
                ready += 1
        if reason == "Completed" and running:
            reason = "Running" if _condition_true(status, "Ready") else "NotReady"
    if meta.get("deletionTimestamp") and status.get("reason") == "NodeLost":
        reason = "Unknown"
    elif meta.get("deletionTimestamp") and phase not in ("Succeeded", "Failed"):
        reason = "Terminating"
    shown_restarts: Any = str(restarts)
    if restarts and last_restart is not None:
        shown_restarts = (
            f"{restarts} ({human_duration((datetime.now(UTC) - last_restart).total_seconds())} ago)"
        )
    ips = status.get("podIPs") or []
    ip = (ips[0].get("ip") if ips else "") or "<none>"
    gates = spec.get("readinessGates") or []
    gates_cell = "<none>"
    if gates:
        true = sum(_condition_true(status, g.get("conditionType", "")) for g in gates)
        gates_cell = f"{true}/{len(gates)}"
    cells = [
        meta.get("name", ""),
        f"{ready}/{total}",
        reason,
        shown_restarts,
        since(meta.get("creationTimestamp")),
        ip,
        spec.get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>",
        gates_cell,
    ]
    return cells, conditions


def _row_condition(reason: str, message: str) -> Obj:
    return {"type": "Completed", "status": "True", "reason": reason, "message": message}


def print_node(node: Obj) -> list[Any]:
    """`printNode`: NAME STATUS ROLES AGE VERSION, INTERNAL-IP EXTERNAL-IP OS-IMAGE KERNEL RUNTIME."""
    meta, spec, status = (node.get(k) or {} for k in ("metadata", "spec", "status"))
    conds = {c.get("type"): c for c in status.get("conditions") or []}
    shown = []
    if "Ready" in conds:
        shown.append("Ready" if conds["Ready"].get("status") == "True" else "NotReady")
    if not shown:
        shown.append("Unknown")
    if spec.get("unschedulable"):
        shown.append("SchedulingDisabled")
    labels = meta.get("labels") or {}
    roles = sorted(
        {
            k.removeprefix("node-role.kubernetes.io/")
            for k in labels
            if k.startswith("node-role.kubernetes.io/")
        }
        | ({labels["kubernetes.io/role"]} if labels.get("kubernetes.io/role") else set())
    )
    info = status.get("nodeInfo") or {}

    def address(kind: str) -> str:
        for a in status.get("addresses") or []:
            if a.get("type") == kind:
                return a.get("address", "")
        return "<none>"

    return [
        meta.get("name", ""),
        ",".join(shown),
        ",".join(r for r in roles if r) or "<none>",
        since(meta.get("creationTimestamp")),
        info.get("kubeletVersion", ""),
        address("InternalIP"),
        address("ExternalIP"),
        info.get("osImage") or "<unknown>",
        info.get("kernelVersion") or "<unknown>",
        info.get("containerRuntimeVersion") or "<unknown>",
    ]


def print_event(ev: Obj) -> list[Any]:
    """`printEvent`: LAST SEEN TYPE REASON OBJECT, SUBOBJECT SOURCE, MESSAGE, FIRST SEEN COUNT NAME."""
    first = since(ev.get("firstTimestamp")) if ev.get("firstTimestamp") else since(ev.get("eventTime"))
    last = since(ev.get("lastTimestamp")) if ev.get("lastTimestamp") else first
    count = ev.get("count") or 0
    series = ev.get("series")
    if series:
        last, count = since(series.get("lastObservedTime")), series.get("count", 0)
    elif count == 0:
        count = 1
    io = ev.get("involvedObject") or {}
    target = str(io.get("kind") or "").lower()
    if io.get("name"):
        target = f"{target}/{io['name']}"
    source = ev.get("source") or {}
    component = source.get("component") or ev.get("reportingComponent") or ""
    instance = source.get("host") or ev.get("reportingInstance") or ""
    return [
        last,
        ev.get("type", ""),
        ev.get("reason", ""),
        target,
        io.get("fieldPath", ""),
        f"{component}, {instance}" if instance else component,
        str(ev.get("message") or "").strip(),
        first,
        int(count),
        (ev.get("metadata") or {}).get("name", ""),
    ]


def _builtin_cells(res: Resource, obj: Obj) -> tuple[list[Any], list[Obj]]:
    meta = obj.get("metadata") or {}
    if res is R.PODS:
        return print_pod(obj)
    if res is R.NODES:
        return print_node(obj), []
    if res is R.EVENTS:
        return print_event(obj), []
    if res is R.NAMESPACES:
        return [
            meta.get("name", ""),
            (obj.get("status") or {}).get("phase", ""),
            since(meta.get("creationTimestamp")),
        ], []
    if res is R.CONFIGMAPS:
        data = len(obj.get("data") or {}) + len(obj.get("binaryData") or {})
        return [meta.get("name", ""), data, since(meta.get("creationTimestamp"))], []
    if res is R.SECRETS:  # printSecret
        row = [meta.get("name", ""), obj.get("type", ""), len(obj.get("data") or {})]
        return [*row, since(meta.get("creationTimestamp"))], []
    if res is R.SERVICE_ACCOUNTS:  # printServiceAccount
        return [meta.get("name", ""), len(obj.get("secrets") or []), since(meta.get("creationTimestamp"))], []
    if res in (R.ROLES, R.CLUSTER_ROLES):  # printRole, printClusterRole: the creation time in RFC 3339
        return [meta.get("name", ""), meta.get("creationTimestamp") or ""], []
    if res in (R.ROLE_BINDINGS, R.CLUSTER_ROLE_BINDINGS):  # printRoleBinding, printClusterRoleBinding
        ref = obj.get("roleRef") or {}
        subjects = [s for s in obj.get("subjects") or () if isinstance(s, dict)]

        def named(kind: str) -> str:
            return ", ".join(
                f"{s.get('namespace', '')}/{s.get('name', '')}"
                if kind == "ServiceAccount"
                else s.get("name", "")
                for s in subjects
                if s.get("kind") == kind
            )

        row = [meta.get("name", ""), f"{ref.get('kind', '')}/{ref.get('name', '')}"]
        row += [since(meta.get("creationTimestamp")), named("User"), named("Group"), named("ServiceAccount")]
        return row, []
    if res is R.VALIDATING_ADMISSION_POLICIES:
        spec = obj.get("spec") or {}
        kind = spec.get("paramKind") or {}
        param_kind = f"{kind.get('apiVersion')}/{kind.get('kind')}" if kind else "<unset>"
        return [
            meta.get("name", ""),
            len(spec.get("validations") or []),
            param_kind,
            since(meta.get("creationTimestamp")),
        ], []
    if res is R.VALIDATING_ADMISSION_POLICY_BINDINGS:
        spec = obj.get("spec") or {}
        ref = spec.get("paramRef") or {}
        shown = "/".join(x for x in (ref.get("namespace"), ref.get("name")) if x) or (
            "*" if ref else "<unset>"
        )
        return [
            meta.get("name", ""),
            spec.get("policyName", ""),
            shown,
            since(meta.get("creationTimestamp")),
        ], []
    raise KeyError(res.kind)


# -- CRD printer columns ------------------------------------------------------------------------------------
def _json_path(obj: Any, path: str) -> Any:
    """A CRD printer column's JSONPath (only simple field paths are allowed by CRD validation)."""
    value = obj
    for part in re.findall(r"\[['\"]([^'\"]+)['\"]\]|\[(\d+)\]|\.([^.\[]+)", path):
        key, index, field = part
        if index:
            if not isinstance(value, list) or int(index) >= len(value):
                return None
            value = value[int(index)]
            continue
        name = key or field
        if not isinstance(value, dict) or name not in value:
            return None
        value = value[name]
    return value


def _crd_cell(kind: str, value: Any) -> Any:
    """`cellForJSONValue` (strings printed as JSONPath prints them)."""
    if value is None:
        return None
    if kind == "string":
        return value if isinstance(value, str) else _go_print(value)
    if kind == "integer" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value)
    if kind == "number" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if kind == "boolean" and isinstance(value, bool):
        return value
    if kind == "date" and isinstance(value, str):
        when = _parse_time(value)
        return "<invalid>" if when is None else human_duration((datetime.now(UTC) - when).total_seconds())
    return None


def _go_print(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def crd_columns(res: Resource, version: str) -> list[Obj]:
    columns = crd_version(res, version).get("additionalPrinterColumns")
    if not columns:  # the default: NAME and "Created At"
        columns = [{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}]
    out = [_NAME]
    for c in columns:
        out.append(
            _col(
                c["name"],
                c.get("type", "string"),
                int(c.get("priority", 0)),
                c.get("description", ""),
                c.get("format", ""),
            )
        )
    return out


# -- the Table ----------------------------------------------------------------------------------------------
def wants_table(accept: str | None) -> str | None:
    """The Table version (`v1`/`v1beta1`) asked for when a Table clause comes before any plain JSON one."""
    for clause in (accept or "").split(","):
        media, *params = [p.strip() for p in clause.split(";")]
        args = dict(p.split("=", 1) for p in params if "=" in p)
        if media not in ("application/json", "*/*", "application/*"):
            continue
        if "as" not in args:
            return None
        if (
            args.get("as") == "Table"
            and args.get("g") == "meta.k8s.io"
            and args.get("v") in ("v1", "v1beta1")
        ):
            return args["v"]
    return None


def table(
    res: Resource, version: str, objs: list[Obj], table_version: str, include: str, list_meta: Obj
) -> Obj:
    """A `meta.k8s.io` Table of `objs` (`include`: None, Metadata or Object, as `includeObject`)."""
    if include not in ("None", "Metadata", "Object"):
        raise ApiError(
            400,
            f'includeObject: Unsupported value: "{include}": supported values: "None", "Metadata", "Object"',
        )
    if not res.builtin:
        columns = crd_columns(res, version)
        specs = crd_version(res, version).get("additionalPrinterColumns") or [
            {"type": "date", "jsonPath": ".metadata.creationTimestamp"}
        ]
    else:
        columns = COLUMNS[res.kind]
    rows = []
    for obj in objs:
        if not res.builtin:
            cells = [(obj.get("metadata") or {}).get("name", "")]
            cells += [_crd_cell(s.get("type", "string"), _json_path(obj, s["jsonPath"])) for s in specs]
            conditions: list[Obj] = []
        else:
            cells, conditions = _builtin_cells(res, obj)
        row: Obj = {"cells": cells}
        if conditions:
            row["conditions"] = conditions
        if include == "Object":
            row["object"] = obj
        elif include == "Metadata":
            row["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": f"meta.k8s.io/{table_version}",
                "metadata": obj.get("metadata") or {},
            }
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": f"meta.k8s.io/{table_version}",
        "metadata": list_meta,
        "columnDefinitions": columns,
        "rows": rows,
    }
