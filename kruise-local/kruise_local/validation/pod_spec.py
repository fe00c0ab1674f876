"""Pod validation (pkg/apis/core/validation/validation.go)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from kruise_local.selectors import validate_label_value

from .decode import _check_decodable
from .fields import (
    MAX_INT32,
    Cause,
    _raise_invalid,
    duplicate,
    forbidden,
    invalid_value,
    not_found_value,
    not_supported,
    required,
)
from .meta import _labels_causes, validate_metadata
from .names import (
    _inclusive_range,
    _int,
    _is_config_map_key,
    _is_env_var_name,
    _qualified_name,
    is_dns1123_label,
    is_dns1123_subdomain,
)
from .pod_defaults import _PROBES
from .quantity import format_quantity, parse_quantity

# Volume sources in the order ValidateVolumes checks them, with the field name its "more than 1" error uses.
_VOLUME_SOURCES = (
    ("emptyDir", "emptyDir"),
    ("hostPath", "hostPath"),
    ("gitRepo", "gitRepo"),
    ("gcePersistentDisk", "gcePersistentDisk"),
    ("awsElasticBlockStore", "awsElasticBlockStore"),
    ("secret", "secret"),
    ("nfs", "nfs"),
    ("iscsi", "iscsi"),
    ("glusterfs", "glusterfs"),
    ("flocker", "flocker"),
    ("persistentVolumeClaim", "persistentVolumeClaim"),
    ("rbd", "rbd"),
    ("cinder", "cinder"),
    ("cephfs", "cephFS"),
    ("quobyte", "quobyte"),
    ("downwardAPI", "downwarAPI"),
    ("fc", "fc"),
    ("flexVolume", "flexVolume"),
    ("configMap", "configMap"),
    ("azureFile", "azureFile"),
    ("vsphereVolume", "vsphereVolume"),
    ("photonPersistentDisk", "photonPersistentDisk"),
    ("portworxVolume", "portworxVolume"),
    ("azureDisk", "azureDisk"),
    ("storageos", "storageos"),
    ("projected", "projected"),
    ("scaleIO", "scaleIO"),
    ("csi", "csi"),
    ("ephemeral", "ephemeral"),
    ("image", "image"),
)
_ENV_FIELD_PATHS = (
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "spec.nodeName",
    "spec.serviceAccountName",
    "status.hostIP",
    "status.hostIPs",
    "status.podIP",
    "status.podIPs",
)
_VOLUME_FIELD_PATHS = (
    "metadata.annotations",
    "metadata.labels",
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
)
_CONVERTIBLE_FIELD_PATHS = {
    "metadata.annotations",
    "metadata.labels",
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.serviceAccountName",
    "spec.schedulerName",
    "status.phase",
    "status.hostIP",
    "status.hostIPs",
    "status.podIP",
    "status.podIPs",
    "spec.host",
}
_RESOURCE_FIELD_PATHS = (
    "limits.cpu",
    "limits.ephemeral-storage",
    "limits.memory",
    "requests.cpu",
    "requests.ephemeral-storage",
    "requests.memory",
)
_STANDARD_CONTAINER_RESOURCES = {"cpu", "memory", "ephemeral-storage"}
POD_UPDATE_FORBIDDEN = (
    "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,"
    "`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),"
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"
)


def _split_subscripted(path: str) -> tuple[str, str] | None:
    """`metadata.labels['k']` -> ("metadata.labels", "k"), as fieldpath.SplitMaybeSubscriptedPath."""
    if not path.endswith("']"):
        return None
    head, sep, subscript = path[:-2].partition("['")
    if not sep or not head:
        return None
    return head, subscript


def _object_field_selector(ref: Mapping[str, Any], supported: tuple[str, ...], field: str) -> list[Cause]:
    api_version = ref.get("apiVersion") or ""
    field_path = ref.get("fieldPath") or ""
    if not api_version:
        return [required(f"{field}.apiVersion")]
    if not field_path:
        return [required(f"{field}.fieldPath")]
    if api_version != "v1":
        message = f"error converting fieldPath: unsupported pod version: {api_version}"
        return [invalid_value(f"{field}.fieldPath", field_path, message)]
    sub = _split_subscripted(field_path)
    if sub is not None:
        path, subscript = sub
        if path == "metadata.annotations":
            return _qualified_name(subscript.lower(), field)
        if path == "metadata.labels":
            return _qualified_name(subscript, field)
        message = f"error converting fieldPath: field label does not support subscript: {field_path}"
        return [invalid_value(f"{field}.fieldPath", field_path, message)]
    if field_path not in _CONVERTIBLE_FIELD_PATHS:
        message = f"error converting fieldPath: field label not supported: {field_path}"
        return [invalid_value(f"{field}.fieldPath", field_path, message)]
    internal = "spec.nodeName" if field_path == "spec.host" else field_path
    if internal not in supported:
        return [not_supported(f"{field}.fieldPath", internal, supported)]
    return []


def _env_causes(env: Any, field: str, relaxed: bool) -> list[Cause]:
    causes: list[Cause] = []
    for i, ev in enumerate(env or []):
        path = f"{field}[{i}]"
        if not isinstance(ev, Mapping):
            causes.append(invalid_value(path, ev, "must be an object"))
            continue
        name = ev.get("name") or ""
        if not name:
            causes.append(required(f"{path}.name"))
        else:
            causes += [invalid_value(f"{path}.name", name, m) for m in _is_env_var_name(str(name), relaxed)]
        value_from = ev.get("valueFrom")
        if value_from is None:
            continue
        vf_path = f"{path}.valueFrom"
        sources = 0
        if isinstance(value_from.get("fieldRef"), Mapping):
            sources += 1
            causes += _object_field_selector(value_from["fieldRef"], _ENV_FIELD_PATHS, f"{vf_path}.fieldRef")
        if isinstance(value_from.get("resourceFieldRef"), Mapping):
            sources += 1
            resource = value_from["resourceFieldRef"].get("resource") or ""
            rpath = f"{vf_path}.resourceFieldRef"
            if not resource:
                causes.append(required(f"{rpath}.resource"))
            elif resource not in _RESOURCE_FIELD_PATHS and not resource.startswith(
                ("requests.hugepages-", "limits.hugepages-")
            ):
                causes.append(not_supported(f"{rpath}.resource", resource, _RESOURCE_FIELD_PATHS))
        for key in ("configMapKeyRef", "secretKeyRef"):
            ref = value_from.get(key)
            if isinstance(ref, Mapping):
                sources += 1
                kpath = f"{vf_path}.{key}"
                ref_name = ref.get("name") or ""
                causes += [
                    invalid_value(f"{kpath}.name", ref_name, m) for m in is_dns1123_subdomain(ref_name)
                ]
                ref_key = ref.get("key") or ""
                if not ref_key:
                    causes.append(required(f"{kpath}.key"))
                else:
                    causes += [invalid_value(f"{kpath}.key", ref_key, m) for m in _is_config_map_key(ref_key)]
        if sources == 0:
            message = (
                "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`"
            )
            causes.append(invalid_value(vf_path, "", message))
        elif ev.get("value"):
            causes.append(invalid_value(vf_path, "", "may not be specified when `value` is not empty"))
        elif sources > 1:
            causes.append(invalid_value(vf_path, "", "may not have more than one field specified at a time"))
    return causes


def _volumes_causes(volumes: Any, field: str) -> tuple[set[str], list[Cause]]:
    names: set[str] = set()
    causes: list[Cause] = []
    for i, vol in enumerate(volumes or []):
        path = f"{field}[{i}]"
        if not isinstance(vol, Mapping):
            causes.append(invalid_value(path, vol, "must be an object"))
            continue
        errs: list[Cause] = []
        count = 0
        for key, err_name in _VOLUME_SOURCES:
            source = vol.get(key)
            if source is None:
                continue
            if count > 0:
                errs.append(forbidden(f"{path}.{err_name}", "may not specify more than 1 volume type"))
                continue
            count += 1
            errs += _volume_source_causes(key, source, f"{path}.{key}")
        if count == 0:
            errs.append(required(path, "must specify a volume type"))
        name = vol.get("name") or ""
        if not name:
            errs.append(required(f"{path}.name"))
        else:
            errs += [invalid_value(f"{path}.name", name, m) for m in is_dns1123_label(str(name))]
        if name in names:
            errs.append(duplicate(f"{path}.name", name))
        if errs:
            causes += errs
        else:
            names.add(name)
    return names, causes


def _volume_source_causes(key: str, source: Any, field: str) -> list[Cause]:
    if not isinstance(source, Mapping):
        return []
    if key == "emptyDir" and source.get("sizeLimit") is not None:
        try:
            if parse_quantity(source["sizeLimit"]) < 0:
                return [forbidden(f"{field}.sizeLimit", "SizeLimit field must be a valid resource quantity")]
        except ValueError:
            return []
    if key == "hostPath" and not source.get("path"):
        return [required(f"{field}.path")]
    if key == "secret" and not source.get("secretName"):
        return [required(f"{field}.secretName")]
    if key == "configMap" and not source.get("name"):
        return [required(f"{field}.name")]
    if key == "persistentVolumeClaim" and not source.get("claimName"):
        return [required(f"{field}.claimName")]
    if key == "downwardAPI":
        causes: list[Cause] = []
        for item in source.get("items") or []:
            if not isinstance(item, Mapping):
                continue
            if not item.get("path"):
                causes.append(required(f"{field}.path"))
            if isinstance(item.get("fieldRef"), Mapping):
                causes += _object_field_selector(item["fieldRef"], _VOLUME_FIELD_PATHS, f"{field}.fieldRef")
            elif item.get("resourceFieldRef") is None:
                causes.append(required(field, "one of fieldRef and resourceFieldRef is required"))
        return causes
    return []


def _volume_mounts_causes(mounts: Any, volumes: set[str], field: str) -> list[Cause]:
    causes: list[Cause] = []
    paths: set[str] = set()
    for i, mnt in enumerate(mounts or []):
        path = f"{field}[{i}]"
        if not isinstance(mnt, Mapping):
            causes.append(invalid_value(path, mnt, "must be an object"))
            continue
        name = mnt.get("name") or ""
        if not name:
            causes.append(required(f"{path}.name"))
        if name not in volumes:
            causes.append(not_found_value(f"{path}.name", name))
        mount_path = mnt.get("mountPath") or ""
        if not mount_path:
            causes.append(required(f"{path}.mountPath"))
        if mount_path in paths:
            causes.append(invalid_value(f"{path}.mountPath", mount_path, "must be unique"))
        paths.add(mount_path)
        for key in ("subPath", "subPathExpr"):
            sub = mnt.get(key) or ""
            if sub:
                # The real code reports these under `volumeMounts.subPath` (no index), which is mirrored here.
                if sub.startswith("/"):
                    causes.append(invalid_value(f"{field}.{key}", sub, "must be a relative path"))
                if ".." in sub.split("/"):
                    causes.append(invalid_value(f"{field}.{key}", sub, "must not contain '..'"))
        if mnt.get("subPath") and mnt.get("subPathExpr"):
            causes.append(
                invalid_value(
                    f"{path}.subPathExpr",
                    mnt["subPathExpr"],
                    "subPathExpr and subPath are mutually exclusive",
                )
            )
    return causes


def _port_number_causes(value: Any, field: str) -> list[Cause]:
    number = _int(value)
    if number is None or not 1 <= number <= 65535:
        return [invalid_value(field, value, _inclusive_range(1, 65535))]
    return []


def _ports_causes(ports: Any, field: str) -> list[Cause]:
    causes: list[Cause] = []
    names: set[str] = set()
    for i, port in enumerate(ports or []):
        path = f"{field}[{i}]"
        if not isinstance(port, Mapping):
            causes.append(invalid_value(path, port, "must be an object"))
            continue
        name = port.get("name") or ""
        if name:
            if len(name) > 15 or not re.fullmatch("[a-z0-9]([-a-z0-9]*[a-z0-9])?", name) or "--" in name:
                causes.append(
                    invalid_value(f"{path}.name", name, "must be an IANA_SVC_NAME (at most 15 characters)")
                )
            elif name in names:
                causes.append(duplicate(f"{path}.name", name))
            else:
                names.add(name)
        if not port.get("containerPort"):
            causes.append(required(f"{path}.containerPort"))
        else:
            causes += _port_number_causes(port["containerPort"], f"{path}.containerPort")
        if port.get("hostPort"):
            causes += _port_number_causes(port["hostPort"], f"{path}.hostPort")
        protocol = port.get("protocol") or ""
        if not protocol:
            causes.append(required(f"{path}.protocol"))
        elif protocol not in ("SCTP", "TCP", "UDP"):
            causes.append(not_supported(f"{path}.protocol", protocol, ("SCTP", "TCP", "UDP")))
    return causes


def _is_native_resource(name: str) -> bool:
    return "/" not in name or name.split("/", 1)[0].endswith("kubernetes.io")


def _resources_causes(resources: Any, field: str) -> list[Cause]:
    if not isinstance(resources, Mapping):
        return []
    causes: list[Cause] = []
    limits = resources.get("limits") or {}
    requests = resources.get("requests") or {}
    parsed_limits: dict[str, Decimal] = {}
    for kind, values, parsed in (("limits", limits, parsed_limits), ("requests", requests, {})):
        for name, value in (values or {}).items():
            path = f"{field}.{kind}[{name}]"
            if (
                "/" not in name
                and name not in _STANDARD_CONTAINER_RESOURCES
                and not name.startswith("hugepages-")
            ):
                causes.append(invalid_value(path, name, "must be a standard resource for containers"))
            try:
                amount = parse_quantity(value)
            except ValueError:
                continue
            if amount < 0:
                causes.append(
                    invalid_value(path, format_quantity(value), "must be greater than or equal to 0")
                )
            elif not _is_native_resource(name) and amount != amount.to_integral_value():
                causes.append(invalid_value(path, format_quantity(value), "must be an integer"))
            parsed[name] = amount
    for name, value in (requests or {}).items():
        try:
            amount = parse_quantity(value)
        except ValueError:
            continue
        overcommit = _is_native_resource(name) and not name.startswith("hugepages-")
        if name in parsed_limits:
            limit = parsed_limits[name]
            shown_limit = format_quantity(limits[name])
            if amount != limit and not overcommit:
                message = f"must be equal to {name} limit of {shown_limit}"
                causes.append(invalid_value(f"{field}.requests", format_quantity(value), message))
            elif amount > limit:
                message = f"must be less than or equal to {name} limit of {shown_limit}"
                causes.append(invalid_value(f"{field}.requests", format_quantity(value), message))
        elif not overcommit:
            causes.append(required(f"{field}.limits", "Limit must be set for non overcommitable resources"))
    return causes


def _handler_causes(handler: Any, field: str, grace: int | None, allow_sleep: bool) -> list[Cause]:
    if not isinstance(handler, Mapping):
        return []
    causes: list[Cause] = []
    count = 0
    kinds = ("exec", "httpGet", "tcpSocket", "grpc") + (("sleep",) if allow_sleep else ())
    for key in kinds:
        action = handler.get(key)
        if action is None:
            continue
        if count > 0:
            causes.append(forbidden(f"{field}.{key}", "may not specify more than 1 handler type"))
            continue
        count += 1
        path = f"{field}.{key}"
        if key == "exec" and not (action or {}).get("command"):
            causes.append(required(f"{path}.command"))
        elif key == "httpGet":
            if not action.get("path"):
                causes.append(required(f"{path}.path"))
            port = action.get("port")
            if isinstance(port, str):
                if not re.fullmatch("[a-z0-9]([-a-z0-9]*[a-z0-9])?", port) or len(port) > 15:
                    causes.append(
                        invalid_value(f"{path}.port", port, "must contain only alpha-numeric characters")
                    )
            else:
                causes += _port_number_causes(port, f"{path}.port")
            scheme = action.get("scheme") or ""
            if scheme not in ("HTTP", "HTTPS"):
                causes.append(not_supported(f"{path}.scheme", scheme, ("HTTP", "HTTPS")))
        elif key == "tcpSocket":
            port = action.get("port")
            if not isinstance(port, str):
                causes += _port_number_causes(port, f"{path}.port")
        elif key == "grpc":
            causes += _port_number_causes(action.get("port"), f"{path}.port")
        elif key == "sleep" and grace is not None:
            seconds = _int(action.get("seconds"))
            if seconds is None or seconds <= 0 or seconds > grace:
                message = (
                    f"must be greater than 0 and less than terminationGracePeriodSeconds ({grace}). "
                    "Enable AllowPodLifecycleSleepActionZeroValue feature gate for zero sleep."
                )
                causes.append(invalid_value(path, action.get("seconds"), message))
    if count == 0:
        causes.append(required(field, "must specify a handler type"))
    return causes


def _probe_causes(probe: Any, field: str, grace: int | None, kind: str) -> list[Cause]:
    if not isinstance(probe, Mapping):
        return []
    causes = _handler_causes(probe, field, grace, allow_sleep=False)
    for key in (
        "initialDelaySeconds",
        "timeoutSeconds",
        "periodSeconds",
        "successThreshold",
        "failureThreshold",
    ):
        value = _int(probe.get(key))
        if value is not None and value < 0:
            causes.append(invalid_value(f"{field}.{key}", value, "must be greater than or equal to 0"))
    tgps = probe.get("terminationGracePeriodSeconds")
    if tgps is not None and (_int(tgps) or 0) <= 0:
        causes.append(invalid_value(f"{field}.terminationGracePeriodSeconds", tgps, "must be greater than 0"))
    if kind in ("livenessProbe", "startupProbe") and probe.get("successThreshold", 1) != 1:
        causes.append(invalid_value(f"{field}.successThreshold", probe.get("successThreshold"), "must be 1"))
    if kind == "readinessProbe" and tgps is not None:
        causes.append(
            invalid_value(
                f"{field}.terminationGracePeriodSeconds", tgps, "must not be set for readinessProbes"
            )
        )
    return causes


def _container_common_causes(
    ctr: Mapping[str, Any], volumes: set[str], path: str, relaxed: bool
) -> list[Cause]:
    causes: list[Cause] = []
    name = ctr.get("name") or ""
    if not name:
        causes.append(required(f"{path}.name"))
    else:
        causes += [invalid_value(f"{path}.name", name, m) for m in is_dns1123_label(str(name))]
    if not ctr.get("image"):
        causes.append(required(f"{path}.image"))
    policy = ctr.get("terminationMessagePolicy") or ""
    if not policy:
        causes.append(required(f"{path}.terminationMessagePolicy"))
    elif policy not in ("File", "FallbackToLogsOnError"):
        causes.append(
            not_supported(f"{path}.terminationMessagePolicy", policy, ("File", "FallbackToLogsOnError"))
        )
    causes += _ports_causes(ctr.get("ports"), f"{path}.ports")
    causes += _env_causes(ctr.get("env"), f"{path}.env", relaxed)
    for i, source in enumerate(ctr.get("envFrom") or []):
        if isinstance(source, Mapping):
            refs = [k for k in ("configMapRef", "secretRef") if source.get(k) is not None]
            if not refs:
                message = "must specify one of: `configMapRef` or `secretRef`"
                causes.append(invalid_value(f"{path}.envFrom", "", message))
            elif len(refs) > 1:
                message = "may not have more than one field specified at a time"
                causes.append(invalid_value(f"{path}.envFrom", "", message))
            prefix = source.get("prefix") or ""
            if prefix:
                errs = _is_env_var_name(prefix, relaxed)
                causes += [invalid_value(f"{path}.envFrom[{i}].prefix", prefix, m) for m in errs]
    causes += _volume_mounts_causes(ctr.get("volumeMounts"), volumes, f"{path}.volumeMounts")
    pull = ctr.get("imagePullPolicy") or ""
    if not pull:
        causes.append(required(f"{path}.imagePullPolicy"))
    elif pull not in ("Always", "IfNotPresent", "Never"):
        causes.append(not_supported(f"{path}.imagePullPolicy", pull, ("Always", "IfNotPresent", "Never")))
    causes += _resources_causes(ctr.get("resources"), f"{path}.resources")
    causes += _security_context_causes(ctr.get("securityContext"), f"{path}.securityContext")
    return causes


def _security_context_causes(sc: Any, field: str) -> list[Cause]:
    """`ValidateSecurityContext`'s rules on privilege escalation: false contradicts `privileged: true` and an
    added `CAP_SYS_ADMIN` (compared as that exact string, as upstream does)."""
    if not isinstance(sc, Mapping) or sc.get("allowPrivilegeEscalation") is not False:
        return []
    causes: list[Cause] = []
    if sc.get("privileged") is True:
        message = "cannot set `allowPrivilegeEscalation` to false and `privileged` to true"
        causes.append(invalid_value(field, sc, message))
    added = (sc.get("capabilities") or {}).get("add") if isinstance(sc.get("capabilities"), Mapping) else None
    if isinstance(added, list) and "CAP_SYS_ADMIN" in added:
        message = "cannot set `allowPrivilegeEscalation` to false and `capabilities.Add` CAP_SYS_ADMIN"
        causes.append(invalid_value(field, sc, message))
    return causes


def _lifecycle_and_probe_causes(ctr: Mapping[str, Any], path: str, grace: int | None) -> list[Cause]:
    """The lifecycle hooks and probes of a regular container or of an init container with restartPolicy
    Always (the only init containers that may have them)."""
    causes: list[Cause] = []
    lifecycle = ctr.get("lifecycle")
    if isinstance(lifecycle, Mapping):
        for hook in ("postStart", "preStop"):
            if lifecycle.get(hook) is not None:
                causes += _handler_causes(
                    lifecycle[hook], f"{path}.lifecycle.{hook}", grace, allow_sleep=True
                )
    for probe in _PROBES:
        causes += _probe_causes(ctr.get(probe), f"{path}.{probe}", grace, probe)
    return causes


def _containers_causes(spec: Mapping[str, Any], volumes: set[str], relaxed: bool) -> list[Cause]:
    causes: list[Cause] = []
    grace = _int(spec.get("terminationGracePeriodSeconds"))
    containers = spec.get("containers") or []
    if not containers:
        causes.append(required("spec.containers"))
    names: set[str] = set()
    for i, ctr in enumerate(containers):
        path = f"spec.containers[{i}]"
        if not isinstance(ctr, Mapping):
            causes.append(invalid_value(path, ctr, "must be an object"))
            continue
        causes += _container_common_causes(ctr, volumes, path, relaxed)
        name = ctr.get("name") or ""
        if name in names:
            causes.append(duplicate(f"{path}.name", name))
        else:
            names.add(name)
        causes += _lifecycle_and_probe_causes(ctr, path, grace)
        if ctr.get("restartPolicy") is not None:
            causes.append(forbidden(f"{path}.restartPolicy", "may not be set for non-init containers"))
    all_names = {c.get("name") for c in containers if isinstance(c, Mapping)}
    for i, ctr in enumerate(spec.get("initContainers") or []):
        path = f"spec.initContainers[{i}]"
        if not isinstance(ctr, Mapping):
            causes.append(invalid_value(path, ctr, "must be an object"))
            continue
        causes += _container_common_causes(ctr, volumes, path, relaxed)
        restart_always = False
        if ctr.get("restartPolicy") is not None:
            if ctr["restartPolicy"] != "Always":
                causes.append(not_supported(f"{path}.restartPolicy", ctr["restartPolicy"], ("Always",)))
            restart_always = ctr["restartPolicy"] == "Always"
        name = ctr.get("name") or ""
        if name in all_names:
            causes.append(duplicate(f"{path}.name", name))
        elif name:
            all_names.add(name)
        if restart_always:
            causes += _lifecycle_and_probe_causes(ctr, path, grace)
        else:
            for key in ("lifecycle", *_PROBES):
                if ctr.get(key) is not None:
                    message = "may not be set for init containers without restartPolicy=Always"
                    causes.append(forbidden(f"{path}.{key}", message))
    return causes


def _tolerations_causes(tolerations: Any, field: str) -> list[Cause]:
    causes: list[Cause] = []
    for i, tol in enumerate(tolerations or []):
        path = f"{field}[{i}]"
        if not isinstance(tol, Mapping):
            causes.append(invalid_value(path, tol, "must be an object"))
            continue
        key = tol.get("key") or ""
        operator = tol.get("operator") or ""
        effect = tol.get("effect") or ""
        value = tol.get("value") or ""
        if key:
            causes += _qualified_name(key, f"{path}.key")
        if not key and operator != "Exists":
            message = (
                'operator must be Exists when `key` is empty, which means "match all values and all keys"'
            )
            causes.append(invalid_value(f"{path}.operator", operator, message))
        if tol.get("tolerationSeconds") is not None and effect != "NoExecute":
            message = "effect must be 'NoExecute' when `tolerationSeconds` is set"
            causes.append(invalid_value(f"{path}.effect", effect, message))
        if operator in ("Equal", ""):
            if (err := validate_label_value(value)) is not None:
                causes.append(invalid_value(f"{path}.operator", value, err))
        elif operator == "Exists":
            if value:
                causes.append(
                    invalid_value(
                        f"{path}.operator", value, "value must be empty when `operator` is 'Exists'"
                    )
                )
        else:
            causes.append(not_supported(f"{path}.operator", operator, ("Equal", "Exists")))
        if effect and effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            causes.append(
                not_supported(f"{path}.effect", effect, ("NoSchedule", "PreferNoSchedule", "NoExecute"))
            )
    return causes


def _pod_spec_causes(spec: Mapping[str, Any], relaxed: bool) -> list[Cause]:
    causes: list[Cause] = []
    if spec.get("terminationGracePeriodSeconds") is None:
        causes.append(required("spec.terminationGracePeriodSeconds"))
    volumes, volume_causes = _volumes_causes(spec.get("volumes"), "spec.volumes")
    causes += volume_causes
    causes += _containers_causes(spec, volumes, relaxed)
    restart = spec.get("restartPolicy") or ""
    if not restart:
        causes.append(required("spec.restartPolicy"))
    elif restart not in ("Always", "OnFailure", "Never"):
        causes.append(not_supported("spec.restartPolicy", restart, ("Always", "OnFailure", "Never")))
    dns = spec.get("dnsPolicy") or ""
    dns_values = ("ClusterFirstWithHostNet", "ClusterFirst", "Default", "None")
    if not dns:
        causes.append(required("spec.dnsPolicy"))
    elif dns not in dns_values:
        causes.append(not_supported("spec.dnsPolicy", dns, dns_values))
    causes += _labels_causes(spec.get("nodeSelector"), "spec.nodeSelector")
    seen_gates: set[str] = set()
    for i, gate in enumerate(spec.get("schedulingGates") or []):
        gate_name = (gate or {}).get("name") if isinstance(gate, Mapping) else gate
        causes += _qualified_name(gate_name, f"spec.schedulingGates[{i}]")
        if gate_name in seen_gates:
            causes.append(duplicate(f"spec.schedulingGates[{i}]", gate_name))
        seen_gates.add(gate_name)
    for key in ("serviceAccountName", "nodeName", "priorityClassName"):
        value = spec.get(key) or ""
        if value:
            causes += [invalid_value(f"spec.{key}", value, m) for m in is_dns1123_subdomain(str(value))]
    deadline = spec.get("activeDeadlineSeconds")
    if deadline is not None:
        number = _int(deadline)
        if number is None or not 1 <= number <= MAX_INT32:
            causes.append(
                invalid_value("spec.activeDeadlineSeconds", deadline, _inclusive_range(1, MAX_INT32))
            )
    for key in ("hostname", "subdomain"):
        value = spec.get(key) or ""
        if value:
            causes += [invalid_value(f"spec.{key}", value, m) for m in is_dns1123_label(str(value))]
    causes += _tolerations_causes(spec.get("tolerations"), "spec.tolerations")
    return causes


def _pod_metadata_and_spec_causes(pod: Mapping[str, Any], relaxed: bool) -> list[Cause]:
    causes = validate_metadata("Pod", pod, True)
    spec = pod.get("spec") or {}
    causes += _pod_spec_causes(spec, relaxed)
    for key in ("containers", "initContainers"):
        for i, ctr in enumerate(spec.get(key) or []):
            image = ctr.get("image") if isinstance(ctr, Mapping) else None
            if isinstance(image, str) and image != image.strip():
                causes.append(
                    invalid_value(
                        f"spec.{key}[{i}].image", image, "must not have leading or trailing whitespace"
                    )
                )
    return causes


def validate_pod_create(pod: Mapping[str, Any], *, relaxed_env_names: bool = False) -> None:
    """Validate a (defaulted) pod on create; raise 422 Invalid naming every cause.

    Covers metadata, volumes, containers and init containers (names, image, ports, env and fieldRef paths,
    volumeMounts, pull policy, resources, probes), restartPolicy, dnsPolicy, activeDeadlineSeconds,
    tolerations. Environment variable names follow the strict C-identifier-like rule unless
    `relaxed_env_names` (the rule of the RelaxedEnvironmentVariableValidation feature). An unparseable
    quantity raises 400 BadRequest as decoding would.
    """
    _check_decodable("Pod", pod)
    causes = _pod_metadata_and_spec_causes(pod, relaxed_env_names)
    spec = pod.get("spec") or {}
    if spec.get("ephemeralContainers"):
        causes.append(forbidden("spec.ephemeralContainers", "cannot be set on create"))
    if spec.get("nodeName") and spec.get("schedulingGates"):
        causes.append(forbidden("spec.nodeName", "cannot be set until all schedulingGates have been cleared"))
    _raise_invalid("Pod", pod, causes)
