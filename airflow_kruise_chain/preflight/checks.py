"""The preflight's checks of the cluster, the namespace and the identity, in the order they run (the runner
probe, `probe.py`, runs after them). Each is one function registered with `@register`."""

from __future__ import annotations

import re
from typing import Any

from airflow_kruise_chain.core.kruise import (
    GATE_HELP,
    IMAGE_PULL_JOB_KIND,
    IMAGE_PULL_JOB_PLURAL,
    KRUISE_GROUP,
    KRUISE_VERSION,
)
from airflow_kruise_chain.preflight.base import FAIL, OK, UNKNOWN, WARN, Finding, Preflight, register

MIN_KUBERNETES = (1, 29)
RESIZE_KUBERNETES = (1, 33)
POLICY_KUBERNETES = (1, 30)
KRUISE_KINDS = {IMAGE_PULL_JOB_PLURAL: IMAGE_PULL_JOB_KIND}
DEPLOY_FIX = (
    "kubectl apply -k deploy/ (the namespace, the identity, its Role and the admission policy: docs/rbac.md)"
)
POLICY = "airflow-kruise-chain"
"""the name of deploy/'s ValidatingAdmissionPolicy (and of its binding)"""
_USERNAME = re.compile(r"request\.userInfo\.username\s*==\s*((?:'[^']*'\s*\+?\s*)+)")

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
the stage runner's). Not required: events (what a starting chain pod misses is named at the startup timeout),
pods/resize (static sizing), pods/exec (the go by annotation alone), imagepulljobs (prewarm=False), metrics
(no peak memory)."""
VERB_FEATURES = {"events": "events", "resize": "resize", "exec": "exec", IMAGE_PULL_JOB_PLURAL: "prewarm"}
"""the optional feature each optional verb of `PERMISSIONS` serves (metrics.k8s.io pods: `metrics`)"""
FEATURES_THAT_FAIL = frozenset({"prewarm", "resize"})
"""features default chains use and cannot go without by themselves: a missing verb of them fails a chain
(the others fall back: the go by annotation, no peak memory, the cause named at the timeout)"""


def _version(text: str) -> tuple[int, int]:
    parts = text.lstrip("v").split(".")
    return int(parts[0]), int("".join(c for c in parts[1] if c.isdigit()) or 0)


def _pods(p: Preflight) -> str:
    return f"/api/v1/namespaces/{p.namespace}/pods"


def _message(body: Any) -> str:
    return str((body or {}).get("message", "")) if isinstance(body, dict) else str(body)


@register("connection", needs=())
def connection(p: Preflight) -> Finding:
    """The connection's configuration loads and its API server answers (`/version`)."""
    try:
        host = p.hook.api_client.configuration.host
    except Exception as e:  # an unreadable kubeconfig, a connection that does not exist, ...
        return Finding(
            "connection",
            FAIL,
            f"cannot load the connection's configuration: {type(e).__name__}: {e}",
            "point --kubeconfig at a kubeconfig file (kubectl config view --raw --minify), or --conn-id at "
            "an Airflow connection of type kubernetes or kruise_chain (docs/connection.md)",
        )
    try:
        status, body, _ = p.request("GET", "/version", timeout=15)
    except Exception as e:  # refused, unresolvable, timed out, TLS
        return Finding(
            "connection",
            FAIL,
            f"cannot reach the API server at {host}: {type(e).__name__}: {e}",
            f"check the server address and that this host reaches it (kubectl --server {host} version)",
        )
    if status == 401:
        return Finding(
            "connection",
            FAIL,
            f"the API server at {host} refused the credentials (401 Unauthorized): {_message(body)}",
            "renew the token or client certificate (an expired token, a kubeconfig of another cluster)",
        )
    if status != 200 or not isinstance(body, dict) or "gitVersion" not in body:
        return Finding(
            "connection",
            FAIL,
            f"{host} is not a Kubernetes API server (GET /version answered {status})",
            "check the server address of the kubeconfig or connection",
        )
    return Finding("connection", OK, f"{host} answers (Kubernetes {body['gitVersion']})")


@register("identity")
def identity(p: Preflight) -> Finding:
    """Who the API server says the connection is (SelfSubjectReview, authentication.k8s.io/v1)."""
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    status, body, _ = p.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", review)
    if status == 401:
        return Finding(
            "identity",
            FAIL,
            f"the API server refused the credentials (401 Unauthorized): {_message(body)}",
            "renew the token or client certificate of the connection",
        )
    if status == 403 and '"system:anonymous"' in _message(body):
        status, body = 201, {"status": {"userInfo": {"username": "system:anonymous"}}}
    if status not in (200, 201):
        return Finding(
            "identity",
            UNKNOWN,
            f"cannot tell who the connection is: SelfSubjectReview answered {status}: {_message(body)}",
            "grant create on selfsubjectreviews (every authenticated user has it through system:basic-user)",
        )
    user = ((body.get("status") or {}).get("userInfo")) or {}
    username = str(user.get("username") or "")
    if not username or username == "system:anonymous":
        return Finding(
            "identity",
            FAIL,
            "the API server takes the connection for system:anonymous: it sends no credentials it accepts",
            "give the connection a token or client certificate (a ServiceAccount's: kubectl create token)",
        )
    p.identity = username
    groups = ", ".join(user.get("groups") or []) or "none"
    return Finding("identity", OK, f"{username} (groups: {groups})")


@register("Kubernetes")
def kubernetes_version(p: Preflight) -> Finding:
    status, body = p.get("/version")
    version = str(body.get("gitVersion", "")) if status == 200 else ""
    if not version:
        return Finding("Kubernetes", UNKNOWN, f"GET /version answered {status}: {_message(body)}")
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


@register("namespace")
def namespace(p: Preflight) -> Finding:
    """The namespace exists: read it, or, when the identity may not, learn it from a dry-run pod create
    (NamespaceLifecycle refuses one in a namespace that does not exist)."""
    missing = Finding(
        "namespace",
        FAIL,
        f"the namespace {p.namespace!r} does not exist",
        f"kubectl create namespace {p.namespace}, or {DEPLOY_FIX}, or pass the chains' namespace (-n)",
    )
    status, body = p.get(f"/api/v1/namespaces/{p.namespace}")
    if status == 404:
        return missing
    if status == 200:
        labels = (body.get("metadata") or {}).get("labels") or {}
        enforce = labels.get("pod-security.kubernetes.io/enforce", "none")
        return Finding("namespace", OK, f"{p.namespace!r} exists (Pod Security enforce: {enforce})")
    probe = {
        "metadata": {"generateName": "kruise-chain-preflight-"},
        "spec": {"containers": [{"name": "c", "image": p.runner_image}]},
    }
    created, answer, _ = p.request("POST", _pods(p), probe, [("dryRun", "All")])
    said = _message(answer)
    if created == 404 and f'namespaces "{p.namespace}" not found' in said:
        return missing
    if created == 403 and "cannot create resource" in said:  # RBAC: the namespace was never looked at
        return Finding(
            "namespace",
            UNKNOWN,
            f"cannot tell whether {p.namespace!r} exists: reading it answered {status}, and the identity "
            f"may not create pods there: {said}",
            f"grant the connection's identity the Role in {p.namespace!r} ({DEPLOY_FIX})",
        )
    return Finding("namespace", OK, f"{p.namespace!r} exists (a dry-run pod create got past it)")


@register("OpenKruise", feature="prewarm")
def openkruise(p: Preflight) -> Finding:
    status, group = p.get(f"/apis/{KRUISE_GROUP}")
    fix = (
        "install OpenKruise >= 1.8 with kruise-daemon on the nodes (https://openkruise.io/docs/installation)"
    )
    if status == 404:
        return Finding("OpenKruise", FAIL, f"the cluster serves no {KRUISE_GROUP} API group", fix)
    if status != 200:
        return Finding(
            "OpenKruise", UNKNOWN, f"GET /apis/{KRUISE_GROUP} answered {status}: {_message(group)}"
        )
    versions = [v["version"] for v in group.get("versions") or []]
    served: dict[str, list[str]] = {}
    for version in versions:
        _, resources = p.get(f"/apis/{KRUISE_GROUP}/{version}")
        for r in resources.get("resources") or []:
            served.setdefault(r.get("name", ""), []).append(version)
    missing = [
        f"{kind} {KRUISE_VERSION}"
        for plural, kind in KRUISE_KINDS.items()
        if KRUISE_VERSION not in served.get(plural, [])
    ]
    listing = ", ".join(f"{KRUISE_KINDS[k]} {'/'.join(served[k])}" for k in KRUISE_KINDS if k in served)
    if missing:
        return Finding(
            "OpenKruise", FAIL, f"not served: {', '.join(missing)} (served: {listing or 'none'})", fix
        )
    return Finding("OpenKruise", OK, f"{KRUISE_GROUP} {', '.join(versions)}: {listing}")


@register("ImagePullJobGate", feature="prewarm", needs=("connection", "namespace", "OpenKruise"))
def image_pull_job_gate(p: Preflight) -> Finding:
    from airflow_kruise_chain.core.kruise import build_image_pull_job
    from airflow_kruise_chain.core.manifest import chain_labels

    labels = chain_labels("preflight", "preflight", "preflight")  # a chain's, as the prewarm task labels it
    job = build_image_pull_job(
        "kruise-chain-preflight",
        p.namespace,
        p.runner_image,
        node_name="kruise-chain-preflight",
        labels=labels,
    )
    path = f"/apis/{KRUISE_GROUP}/{KRUISE_VERSION}/namespaces/{p.namespace}/{IMAGE_PULL_JOB_PLURAL}"
    status, body, _ = p.request("POST", path, job, [("dryRun", "All")])
    message = _message(body)
    if status in (200, 201):
        return Finding("ImagePullJobGate", OK, "on (a dry-run ImagePullJob was admitted)")
    if status == 403 and "ImagePullJobGate" in message:
        return Finding("ImagePullJobGate", FAIL, f"off: {message}", GATE_HELP)
    if status == 409:
        return Finding("ImagePullJobGate", OK, "on (an ImagePullJob of the preflight's name exists)")
    return Finding("ImagePullJobGate", UNKNOWN, f"the dry-run ImagePullJob answered {status}: {message}")


@register("in-place resize", feature="resize")
def in_place_resize(p: Preflight) -> Finding:
    status, body = p.get("/api/v1")
    names = {r.get("name") for r in body.get("resources") or []} if status == 200 else set()
    if "pods/resize" in names:
        return Finding("in-place resize", OK, "the API server serves pods/resize")
    return Finding(
        "in-place resize",
        WARN,
        "no pods/resize: chains use the static sizing (both slots reserve the largest stage)",
        "Kubernetes >= 1.33 with InPlacePodVerticalScaling on",
    )


@register("metrics API", feature="metrics")
def metrics_api(p: Preflight) -> Finding:
    status, body = p.get("/apis/metrics.k8s.io/v1beta1")
    if status == 200 and any(r.get("name") == "pods" for r in body.get("resources") or []):
        return Finding("metrics API", OK, "metrics.k8s.io/v1beta1 pods")
    return Finding(
        "metrics API",
        WARN,
        f"metrics.k8s.io is not served ({status}): no peak memory per stage",
        "install metrics-server, or set [kruise_chain] memory_sample_interval = 0",
    )


UNSEALED_HANDLERS = ("runsc",)
"""RuntimeClass handlers under which the runner stays readable by its stages: gVisor's (its sentry does not
make an unreadable executable non-dumpable: `pkg/sentry/kernel/task_exec.go`'s FIXME)"""


def _kernel(version: str) -> tuple[int, int]:
    found = re.match(r"(\d+)\.(\d+)", version)
    return (int(found[1]), int(found[2])) if found else (99, 0)


@register("seal", needs=("connection",))
def seal(p: Preflight) -> Finding:
    """Where the runner would stay readable by its stages (docs/security.md), as far as the API shows it:
    gVisor runtime classes, nodes on Linux before 5.7. What only a node shows (`fs.suid_dumpable`, the
    runtime a node really runs) the runner's init container checks on each chain's node: the runner probe
    and every setup fail there (`runnerinstall.seal_failure`)."""
    concerns, unread = [], []
    status, body = p.get("/apis/node.k8s.io/v1/runtimeclasses")
    if status == 200:
        items = body.get("items") or []
        gvisor = sorted(r["metadata"]["name"] for r in items if r.get("handler") in UNSEALED_HANDLERS)
        if gvisor:
            concerns.append(
                f"runtime classes {', '.join(gvisor)} run gVisor, where a stage can read its runner"
            )
    else:
        unread.append(f"runtime classes ({status})")
    status, body = p.get("/api/v1/nodes")
    if status == 200:
        old = []
        for node in body.get("items") or []:
            kernel = ((node.get("status") or {}).get("nodeInfo") or {}).get("kernelVersion") or ""
            if _kernel(kernel) < (5, 7):
                old.append(f"{node['metadata']['name']} ({kernel})")
        if old:
            concerns.append(
                f"nodes on Linux before 5.7, where a stage can read its runner unless the kernel has 'exec: "
                f"Move would_dump into flush_old_exec': {', '.join(old)}"
            )
    else:
        unread.append(f"nodes ({status})")
    checked = "each chain's setup checks its node (the runner's init container)"
    if concerns:
        return Finding(
            "seal",
            WARN,
            f"{'; '.join(concerns)}; {checked} and fails there",
            "run chains elsewhere (runtime_class_name, node_selector): docs/security.md",
        )
    seen = f"cannot read {' or '.join(unread)}" if unread else "no gVisor runtime class, no kernel before 5.7"
    return Finding("seal", OK, f"{seen}; {checked}")


def may(p: Preflight, group: str, resource: str, sub: str, verb: str) -> bool | str:
    """Whether the identity may `verb` the resource in the namespace (SelfSubjectAccessReview), or why the
    review could not say."""
    attributes = {"namespace": p.namespace, "group": group, "resource": resource, "subresource": sub}
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": {**attributes, "verb": verb}},
    }
    status, body, _ = p.request("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", review)
    if status not in (200, 201):
        return f"SelfSubjectAccessReview answered {status}: {_message(body)}"
    return bool((body.get("status") or {}).get("allowed"))


@register("Role")
def role(p: Preflight) -> Finding:
    """Each verb of deploy/role.yaml (SelfSubjectAccessReview): a required one missing fails, as does one of
    a feature default chains use (prewarm, resize) unless waived; the others warn."""
    failing: list[str] = []
    warning: list[str] = []
    for group, resource, sub, verbs, required in PERMISSIONS:
        feature = VERB_FEATURES.get(sub or resource, "metrics" if group == "metrics.k8s.io" else None)
        if feature in p.without:
            continue
        for verb in verbs:
            allowed = may(p, group, resource, sub, verb)
            if isinstance(allowed, str):
                return Finding("Role", UNKNOWN, f"{allowed}; the verbs were not checked")
            if not allowed:
                name = f"{verb} {resource}/{sub}" if sub else f"{verb} {resource}"
                name += f".{group}" if group else ""
                if (resource, verb) == ("configmaps", "create"):  # an admin may make it once instead
                    warning.append(f"{name} (the runner ConfigMap check says whether chains need it)")
                    continue
                serious = required or feature in FEATURES_THAT_FAIL
                (failing if serious else warning).append(name if required else f"{name} ({feature})")
    who = p.identity or "the connection's identity"
    fix = f"{DEPLOY_FIX}, or apply deploy/role.yaml in {p.namespace!r} and bind it to {who}"
    if failing:
        waive = " (or --without the feature in parentheses)" if any("(" in m for m in failing) else ""
        return Finding(
            "Role", FAIL, f"missing in {p.namespace!r}: {', '.join(failing + warning)}", fix + waive
        )
    if warning:
        return Finding(
            "Role", WARN, f"missing in {p.namespace!r}: {', '.join(warning)}: chains run without", fix
        )
    return Finding("Role", OK, f"every verb of deploy/role.yaml in {p.namespace!r}")


def chain_pod(p: Preflight, level: str, name: str = "kruise-chain-preflight") -> dict[str, Any]:
    """The chain pod as the setup builds it for a one-stage chain of the runner image, with the chain option
    pod_security=`level`."""
    from airflow_kruise_chain.core.manifest import build_chain_pod
    from airflow_kruise_chain.core.spec import ChainSpec, StageSpec

    chain = ChainSpec(
        name="preflight",
        namespace=p.namespace,
        stages=[StageSpec("probe", p.runner_image, ["true"])],
        runner_image=p.runner_image,
        pod_security=level,
    )
    return build_chain_pod(
        chain, pod_name=name, dag_id="preflight", run_id=name, first_images=chain.first_images
    )


def _dry_run_chain_pod(p: Preflight, level: str) -> tuple[int, str, list[str]]:
    """(status, message, warnings) of a dry-run create of the chain pod with pod_security=`level`."""
    pod = chain_pod(p, level)
    pod["metadata"].pop("name")
    pod["metadata"]["generateName"] = "kruise-chain-preflight-"
    status, body, warnings = p.request("POST", _pods(p), pod, [("dryRun", "All")])
    return status, _message(body), warnings


@register("Pod Security", needs=("connection", "namespace"))
def pod_security(p: Preflight) -> Finding:
    """A dry-run create of the chain pod as setup builds it: admitted, admitted only with
    pod_security='restricted', or refused (Pod Security, or an admission policy)."""
    status, message, warnings = _dry_run_chain_pod(p, "baseline")
    fix = (
        "set KruiseChain(..., pod_security='restricted') (docs/pod-security.md), or label the namespace "
        f"for a lower level: kubectl label namespace {p.namespace} "
        "pod-security.kubernetes.io/enforce=baseline --overwrite"
    )
    if status in (200, 201) and not warnings:
        return Finding("Pod Security", OK, "a dry-run chain pod was admitted")
    if status in (200, 201) or (status == 403 and "PodSecurity" in message):
        strict, _, strict_warnings = _dry_run_chain_pod(p, "restricted")
        if strict in (200, 201) and not strict_warnings:
            p.pod_security = "restricted"
            fix = (
                "set KruiseChain(..., pod_security='restricted'): a dry-run chain pod with it was "
                "admitted (docs/pod-security.md)"
            )
        if status in (200, 201):
            return Finding("Pod Security", WARN, f"admitted with warnings: {'; '.join(warnings)}", fix)
        return Finding("Pod Security", FAIL, f"the chain pod is refused: {message}", fix)
    if status == 403 and "ValidatingAdmissionPolicy" in message:
        return Finding(
            "Pod Security",
            FAIL,
            f"an admission policy refuses the chain pod: {message}",
            "the chain's options against the policy (docs/rbac.md), or the policy's variables",
        )
    return Finding("Pod Security", UNKNOWN, f"the dry-run chain pod answered {status}: {message}")


def _policy_usernames(p: Preflight) -> list[str] | None:
    """The usernames deploy/'s policy binds (its matchConditions); [] when it is not installed, None when the
    identity may not read it."""
    status, body = p.get(f"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/{POLICY}")
    if status == 404:
        return []
    if status != 200:
        return None
    names = []
    for condition in (body.get("spec") or {}).get("matchConditions") or []:
        for found in _USERNAME.finditer(str(condition.get("expression", ""))):
            names.append("".join(re.findall(r"'([^']*)'", found.group(1))))
    return names or ["(no username: it holds every identity)"]


@register("admission policy", feature="admission-policy", needs=("connection", "identity", "namespace"))
def admission_policy(p: Preflight) -> Finding:
    """deploy/'s policy binds the connection's identity: a dry-run create of a pod that is not labelled as a
    chain pod must be refused by it (a policy sees dry runs), whoever may read the policy."""
    if _version(str(p.get("/version")[1].get("gitVersion", "v0.0"))) < POLICY_KUBERNETES:
        return Finding(
            "admission policy",
            WARN,
            "no ValidatingAdmissionPolicy before Kubernetes 1.30: the chain identity has its Role alone",
            "Kubernetes >= 1.30, or --without admission-policy",
        )
    probe = {
        "metadata": {"generateName": "kruise-chain-preflight-policy-"},
        "spec": {
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 65532,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "c",
                    "image": p.runner_image,
                    "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                }
            ],
        },
    }
    status, body, _ = p.request("POST", _pods(p), probe, [("dryRun", "All")])
    said = _message(body)
    if status == 403 and f"ValidatingAdmissionPolicy '{POLICY}'" in said:
        return Finding(
            "admission policy", OK, f"{POLICY} holds {p.identity} (a dry-run foreign pod was refused)"
        )
    if status not in (200, 201):
        return Finding("admission policy", UNKNOWN, f"a dry-run pod create answered {status}: {said}")
    usernames = _policy_usernames(p)
    if usernames is None:
        where = f"check its matchConditions: kubectl get validatingadmissionpolicy {POLICY} -o yaml"
    elif usernames:
        where = "its matchConditions name " + ", ".join(repr(u) for u in usernames)
    else:
        where = "it is not installed"
    match = re.fullmatch(r"system:serviceaccount:([^:]+):([^:]+)", p.identity or "")
    fix = (
        f"set serviceAccountNamespace: {match[1]} and serviceAccountName: {match[2]} in "
        "deploy/identity.yaml, then kubectl apply -k deploy/ (docs/rbac.md)"
        if match
        else "connect as the ServiceAccount deploy/identity.yaml names (kubectl create token), or name this "
        "identity in the policy's matchConditions, then kubectl apply -k deploy/"
    )
    return Finding(
        "admission policy",
        FAIL,
        f"the admission policy {POLICY} does not hold {p.identity}: a dry-run pod that is not a chain pod "
        f"was admitted, so the chain identity runs without the policy ({where})",
        fix,
    )
