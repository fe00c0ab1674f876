"""Preflight: can chains run in this namespace, through this connection? Each finding names what is missing
and the fix. Used by `kruise-chain check` (`cli.py`) and the `kruise_chain` connection's Test button
(`KruiseHook.test_connection`).

Every check is a read, a discovery request, a SelfSubjectAccessReview or a server-side dry run
(`dryRun=All`: admitted as a real create is, webhooks and Pod Security included, but never stored), so a
check changes nothing in the cluster.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_kruise_chain.core.kruise import (
    GATE_HELP,
    IMAGE_PULL_JOB_KIND,
    IMAGE_PULL_JOB_PLURAL,
    KRUISE_GROUP,
    KRUISE_VERSION,
)

if TYPE_CHECKING:
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

OK, WARN, FAIL, UNKNOWN = "ok", "warn", "fail", "unknown"
MIN_KUBERNETES = (1, 29)
RESIZE_KUBERNETES = (1, 33)
KRUISE_KINDS = {IMAGE_PULL_JOB_PLURAL: IMAGE_PULL_JOB_KIND}
ROLE_FIX = (
    "apply deploy/role.yaml in the namespace and bind it to the connection's identity (docs/rbac.md): "
    "kubectl apply -n {ns} -f deploy/role.yaml"
)

PERMISSIONS: tuple[tuple[str, str, str, tuple[str, ...], bool], ...] = (
    ("", "pods", "", ("create", "get", "watch", "patch", "delete"), True),
    ("", "configmaps", "", ("get", "create"), True),
    ("", "events", "", ("list",), False),
    ("", "pods", "resize", ("patch",), False),
    ("", "pods", "log", ("get",), True),
    ("", "pods", "exec", ("get", "create"), False),
    (KRUISE_GROUP, IMAGE_PULL_JOB_PLURAL, "", ("create", "get", "watch"), False),
    ("metrics.k8s.io", "pods", "", ("get",), False),
)
"""deploy/role.yaml as (group, resource, subresource, verbs, required): what the provider uses (configmaps:
the stage runner's, `core/runnerinstall.py`; an identity without `create` runs once an admin applied it).
Not required: events (a missing Secret is named at the startup timeout), pods/resize (static sizing without
it), pods/exec (the go by annotation alone), imagepulljobs (prewarm=False), metrics (no peak memory)."""


@dataclass(frozen=True)
class Finding:
    """One check's outcome: `status` ok / warn (chains run, with less) / fail (chains will fail) / unknown."""

    check: str
    status: str
    detail: str
    fix: str = ""

    def line(self) -> str:
        text = f"{self.status.upper():7} {self.check}: {self.detail}"
        return f"{text}\n        fix: {self.fix}" if self.fix else text


def _version(text: str) -> tuple[int, int]:
    parts = text.lstrip("v").split(".")
    return int(parts[0]), int("".join(c for c in parts[1] if c.isdigit()) or 0)


class Preflight:
    """The checks for one namespace, through a hook's API client (a `KruiseHook`, or any KubernetesHook)."""

    def __init__(self, hook: KubernetesHook, namespace: str, runner_image: str) -> None:
        self.hook = hook
        self.namespace = namespace
        self.runner_image = runner_image

    # -- the API, raw ------------------------------------------------------------------------------
    def _request(
        self, method: str, path: str, body: Any = None, query: list[tuple[str, str]] | None = None
    ) -> tuple[int, Any, list[str]]:
        """(status, JSON body, Warning headers) of one request; API errors are answers, not exceptions."""
        from kubernetes.client.exceptions import ApiException

        api = self.hook.api_client
        try:
            resp = api.call_api(
                path,
                method,
                query_params=query or [],
                header_params={"Content-Type": "application/json", "Accept": "application/json"},
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=30,
            )
            resp = resp[0] if isinstance(resp, tuple) else resp
            status, data, headers = resp.status, resp.data, resp.headers
        except ApiException as e:
            status, data, headers = e.status, e.body, e.headers or {}
        try:
            parsed = json.loads(data or b"{}")
        except ValueError:
            parsed = {"message": data.decode(errors="replace") if isinstance(data, bytes) else str(data)}
        getall = getattr(headers, "getlist", None) or getattr(headers, "getall", None)
        warnings = (
            list(getall("Warning")) if getall else [v for k, v in dict(headers).items() if k == "Warning"]
        )
        return status, parsed, warnings

    def _get(self, path: str) -> tuple[int, Any]:
        status, body, _ = self._request("GET", path)
        return status, body

    # -- the checks --------------------------------------------------------------------------------
    def kubernetes_version(self) -> Finding:
        status, body = self._get("/version")
        if status != 200:
            return Finding(
                "Kubernetes",
                FAIL,
                f"GET /version answered {status}: {body.get('message', '')}",
                "check the connection's server and credentials (docs/connection.md)",
            )
        version = str(body.get("gitVersion", ""))
        found = _version(version)
        if found < MIN_KUBERNETES:
            return Finding("Kubernetes", FAIL, f"{version}: older than 1.29", "upgrade to Kubernetes >= 1.29")
        if found < RESIZE_KUBERNETES:
            return Finding(
                "Kubernetes",
                WARN,
                f"{version}: no in-place pod resize before 1.33 (static sizing)",
                "Kubernetes >= 1.33 sizes each stage in place",
            )
        return Finding("Kubernetes", OK, version)

    def openkruise(self) -> Finding:
        status, group = self._get(f"/apis/{KRUISE_GROUP}")
        fix = "install OpenKruise >= 1.8 with kruise-daemon on the nodes (https://openkruise.io/docs/installation)"
        if status == 404:
            return Finding("OpenKruise", FAIL, f"the cluster serves no {KRUISE_GROUP} API group", fix)
        if status != 200:
            return Finding("OpenKruise", UNKNOWN, f"GET /apis/{KRUISE_GROUP} answered {status}")
        versions = [v["version"] for v in group.get("versions") or []]
        served: dict[str, list[str]] = {}
        for version in versions:
            _, resources = self._get(f"/apis/{KRUISE_GROUP}/{version}")
            for r in resources.get("resources") or []:
                served.setdefault(r.get("name", ""), []).append(version)
        missing = [
            f"{kind} {KRUISE_VERSION}"
            for plural, kind in KRUISE_KINDS.items()
            if KRUISE_VERSION not in served.get(plural, [])
        ]
        listing = ", ".join(f"{KRUISE_KINDS[p]} {'/'.join(served[p])}" for p in KRUISE_KINDS if p in served)
        if missing:
            return Finding(
                "OpenKruise", FAIL, f"not served: {', '.join(missing)} (served: {listing or 'none'})", fix
            )
        return Finding("OpenKruise", OK, f"{KRUISE_GROUP} {', '.join(versions)}: {listing}")

    def image_pull_job_gate(self) -> Finding:
        from airflow_kruise_chain.core.kruise import build_image_pull_job

        job = build_image_pull_job(
            "kruise-chain-preflight", self.namespace, self.runner_image, node_name="kruise-chain-preflight"
        )
        path = f"/apis/{KRUISE_GROUP}/{KRUISE_VERSION}/namespaces/{self.namespace}/{IMAGE_PULL_JOB_PLURAL}"
        status, body, _ = self._request("POST", path, job, [("dryRun", "All")])
        message = str(body.get("message", ""))
        if status in (200, 201):
            return Finding("ImagePullJobGate", OK, "on (a dry-run ImagePullJob was admitted)")
        if status == 403 and "ImagePullJobGate" in message:
            return Finding("ImagePullJobGate", FAIL, f"off: {message}", GATE_HELP)
        if status == 409:
            return Finding("ImagePullJobGate", OK, "on (an ImagePullJob of the preflight's name exists)")
        return Finding("ImagePullJobGate", UNKNOWN, f"the dry-run ImagePullJob answered {status}: {message}")

    def in_place_resize(self) -> Finding:
        status, body = self._get("/api/v1")
        names = {r.get("name") for r in body.get("resources") or []} if status == 200 else set()
        if "pods/resize" in names:
            return Finding("in-place resize", OK, "the API server serves pods/resize")
        return Finding(
            "in-place resize",
            WARN,
            "no pods/resize: chains use the static sizing (both slots reserve the largest stage)",
            "Kubernetes >= 1.33 with InPlacePodVerticalScaling on",
        )

    def metrics_api(self) -> Finding:
        status, body = self._get("/apis/metrics.k8s.io/v1beta1")
        if status == 200 and any(r.get("name") == "pods" for r in body.get("resources") or []):
            return Finding("metrics API", OK, "metrics.k8s.io/v1beta1 pods")
        return Finding(
            "metrics API",
            WARN,
            f"metrics.k8s.io is not served ({status}): no peak memory per stage",
            "install metrics-server, or set [kruise_chain] memory_sample_interval = 0",
        )

    def role(self) -> Finding:
        missing: list[tuple[str, bool]] = []
        for group, resource, sub, verbs, required in PERMISSIONS:
            for verb in verbs:
                review = {
                    "apiVersion": "authorization.k8s.io/v1",
                    "kind": "SelfSubjectAccessReview",
                    "spec": {
                        "resourceAttributes": {
                            "namespace": self.namespace,
                            "group": group,
                            "resource": resource,
                            "subresource": sub,
                            "verb": verb,
                        }
                    },
                }
                path = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
                status, body, _ = self._request("POST", path, review)
                if status != 201 and status != 200:
                    return Finding(
                        "Role",
                        UNKNOWN,
                        f"SelfSubjectAccessReview answered {status}: "
                        f"{body.get('message', '')}; the verbs were not checked",
                    )
                if not (body.get("status") or {}).get("allowed"):
                    name = f"{resource}/{sub}" if sub else resource
                    missing.append((f"{verb} {name}{'.' + group if group else ''}", required))
        fix = ROLE_FIX.format(ns=self.namespace)
        if any(required for _, required in missing):
            return Finding(
                "Role", FAIL, f"missing in {self.namespace!r}: {', '.join(m for m, _ in missing)}", fix
            )
        if missing:
            return Finding(
                "Role",
                WARN,
                f"missing in {self.namespace!r}: {', '.join(m for m, _ in missing)} "
                "(optional: in-place sizing, the exec go, prewarm or peak memory go without)",
                fix,
            )
        return Finding("Role", OK, f"every verb of deploy/role.yaml in {self.namespace!r}")

    def _dry_run_chain_pod(self, level: str) -> tuple[int, str, list[str]]:
        """(status, message, warnings) of a dry-run create of the chain pod as setup builds it, with the
        chain option pod_security=`level`."""
        from airflow_kruise_chain.core.manifest import build_chain_pod
        from airflow_kruise_chain.core.spec import ChainSpec, StageSpec

        chain = ChainSpec(
            name="preflight",
            namespace=self.namespace,
            stages=[StageSpec("probe", self.runner_image, ["true"])],
            runner_image=self.runner_image,
            pod_security=level,
        )
        pod = build_chain_pod(
            chain,
            pod_name="kruise-chain-preflight",
            dag_id="preflight",
            run_id="preflight",
            first_images=chain.first_images,
        )
        pod["metadata"].pop("name")
        pod["metadata"]["generateName"] = "kruise-chain-preflight-"
        path = f"/api/v1/namespaces/{self.namespace}/pods"
        status, body, warnings = self._request("POST", path, pod, [("dryRun", "All")])
        return status, str(body.get("message", "")), warnings

    def pod_security(self) -> Finding:
        status, message, warnings = self._dry_run_chain_pod("baseline")
        fix = (
            "set KruiseChain(..., pod_security='restricted') (docs/pod-security.md), or label the namespace "
            f"for a lower level: kubectl label namespace {self.namespace} "
            "pod-security.kubernetes.io/enforce=baseline --overwrite"
        )
        if status in (200, 201) and not warnings:
            return Finding("Pod Security", OK, "a dry-run chain pod was admitted")
        if status in (200, 201) or (status == 403 and "PodSecurity" in message):
            strict, _, strict_warnings = self._dry_run_chain_pod("restricted")
            if strict in (200, 201) and not strict_warnings:
                fix = (
                    "set KruiseChain(..., pod_security='restricted'): a dry-run chain pod with it was "
                    "admitted (docs/pod-security.md)"
                )
            if status in (200, 201):
                return Finding("Pod Security", WARN, f"admitted with warnings: {'; '.join(warnings)}", fix)
            return Finding("Pod Security", FAIL, f"the chain pod is refused: {message}", fix)
        return Finding("Pod Security", UNKNOWN, f"the dry-run chain pod answered {status}: {message}")

    def run(self) -> list[Finding]:
        checks: list[Callable[[], Finding]] = [
            self.kubernetes_version,
            self.openkruise,
            self.image_pull_job_gate,
            self.in_place_resize,
            self.metrics_api,
            self.role,
            self.pod_security,
        ]
        findings = []
        for check in checks:
            try:
                findings.append(check())
            except Exception as e:  # one check that cannot run must not hide the others
                findings.append(
                    Finding(check.__name__.replace("_", " "), UNKNOWN, f"{type(e).__name__}: {e}")
                )
            if findings[0].status == FAIL:  # no API server: nothing else can be checked
                break
        return findings


def check(hook: KubernetesHook, namespace: str, runner_image: str | None = None) -> list[Finding]:
    """The findings for chains in `namespace` through `hook`'s connection."""
    from airflow_kruise_chain.config import runner_image as configured_runner_image

    return Preflight(hook, namespace, runner_image or configured_runner_image()).run()


def summary(findings: list[Finding]) -> tuple[bool, str]:
    """(no finding failed, one line per finding) for the connection's Test button."""
    failed = [f for f in findings if f.status == FAIL]
    return not failed, " | ".join(f.line().replace("\n        ", " ") for f in findings)
