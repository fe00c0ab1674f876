"""The resource types the local API server serves."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Resource:
    """One served resource type: where it lives in the API and how it is stored."""

    group: str
    versions: tuple[str, ...]
    plural: str
    kind: str
    namespaced: bool
    singular: str
    short_names: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    verbs: tuple[str, ...] = (
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch",
    )
    field_selectors: frozenset[str] = field(default_factory=frozenset)
    categories: tuple[str, ...] = ()
    """discovery's `categories` (`kubectl get all` lists the resources in `all`)"""

    @property
    def builtin(self) -> bool:
        """A Kubernetes type (core or a built-in API group), not a CustomResourceDefinition's."""
        return self.group in BUILTIN_GROUPS

    @property
    def key(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def api_version(self, version: str | None = None) -> str:
        version = version or self.versions[0]
        return f"{self.group}/{version}" if self.group else version


_META = frozenset({"metadata.name", "metadata.namespace"})
KRUISE = "apps.kruise.io"
ADMISSION = "admissionregistration.k8s.io"
RBAC = "rbac.authorization.k8s.io"
BUILTIN_GROUPS = frozenset({"", ADMISSION, RBAC})

PODS = Resource(
    "",
    ("v1",),
    "pods",
    "Pod",
    True,
    "pod",
    ("po",),
    ("status", "log", "resize", "eviction", "exec", "attach"),
    field_selectors=_META | {"spec.nodeName", "status.phase", "spec.restartPolicy", "spec.schedulerName"},
    categories=("all",),  # pkg/registry/core/pod/storage `REST.Categories`
)
NAMESPACES = Resource(
    "", ("v1",), "namespaces", "Namespace", False, "namespace", ("ns",), ("status",), field_selectors=_META
)
DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
"""the namespaces a cluster starts with, which may not be deleted"""
NODES = Resource("", ("v1",), "nodes", "Node", False, "node", ("no",), ("status",), field_selectors=_META)
CONFIGMAPS = Resource(
    "", ("v1",), "configmaps", "ConfigMap", True, "configmap", ("cm",), field_selectors=_META
)
SECRETS = Resource(
    "",
    ("v1",),
    "secrets",
    "Secret",
    True,
    "secret",
    (),
    field_selectors=_META | {"type"},  # pkg/registry/core/secret/strategy.go `SelectableFields`
)
SERVICE_ACCOUNTS = Resource(
    "",
    ("v1",),
    "serviceaccounts",
    "ServiceAccount",
    True,
    "serviceaccount",
    ("sa",),
    ("token",),  # TokenRequest (authentication.k8s.io/v1), `kubectl create token`
    field_selectors=_META,
)
EVENTS = Resource(
    "",
    ("v1",),
    "events",
    "Event",
    True,
    "event",
    ("ev",),
    # `AddFieldLabelConversionsForEvent` (pkg/apis/core/v1/conversion.go) and the fields of
    # `ToSelectableFields` (pkg/registry/core/event/strategy.go): `kubectl events --for` sends
    # involvedObject.apiVersion/kind/name
    field_selectors=_META
    | {
        "involvedObject.apiVersion",
        "involvedObject.fieldPath",
        "involvedObject.kind",
        "involvedObject.name",
        "involvedObject.namespace",
        "involvedObject.resourceVersion",
        "involvedObject.uid",
        "reason",
        "reportingComponent",
        "source",
        "type",
    },
)
IMAGE_PULL_JOBS = Resource(
    KRUISE,
    ("v1alpha1", "v1beta1"),
    "imagepulljobs",
    "ImagePullJob",
    True,
    "imagepulljob",
    (),
    ("status",),
    field_selectors=_META,
)
NODE_IMAGES = Resource(
    KRUISE,
    ("v1alpha1", "v1beta1"),
    "nodeimages",
    "NodeImage",
    False,
    "nodeimage",
    (),
    ("status",),
    field_selectors=_META,
)
CRRS = Resource(
    KRUISE,
    ("v1alpha1",),
    "containerrecreaterequests",
    "ContainerRecreateRequest",
    True,
    "containerrecreaterequest",
    ("crr",),
    ("status",),
    field_selectors=_META,
)
POD_METRICS = Resource(
    "metrics.k8s.io",
    ("v1beta1",),
    "pods",
    "PodMetrics",
    True,
    "",
    (),
    (),
    verbs=("get", "list"),
    field_selectors=_META,
)
NODE_METRICS = Resource(
    "metrics.k8s.io",
    ("v1beta1",),
    "nodes",
    "NodeMetrics",
    False,
    "",
    (),
    (),
    verbs=("get", "list"),
    field_selectors=_META,
)
SELF_SUBJECT_ACCESS_REVIEWS = Resource(
    "authorization.k8s.io",
    ("v1",),
    "selfsubjectaccessreviews",
    "SelfSubjectAccessReview",
    False,
    "",
    verbs=("create",),
)
SELF_SUBJECT_RULES_REVIEWS = Resource(
    "authorization.k8s.io",
    ("v1",),
    "selfsubjectrulesreviews",
    "SelfSubjectRulesReview",
    False,
    "",
    verbs=("create",),
)
SELF_SUBJECT_REVIEWS = Resource(
    "authentication.k8s.io", ("v1",), "selfsubjectreviews", "SelfSubjectReview", False, "", verbs=("create",)
)
VALIDATING_ADMISSION_POLICIES = Resource(
    ADMISSION,
    ("v1",),
    "validatingadmissionpolicies",
    "ValidatingAdmissionPolicy",
    False,
    "validatingadmissionpolicy",
    (),
    ("status",),
    field_selectors=_META,
)
VALIDATING_ADMISSION_POLICY_BINDINGS = Resource(
    ADMISSION,
    ("v1",),
    "validatingadmissionpolicybindings",
    "ValidatingAdmissionPolicyBinding",
    False,
    "validatingadmissionpolicybinding",
    (),
    (),
    field_selectors=_META,
)
ROLES = Resource(RBAC, ("v1",), "roles", "Role", True, "role", field_selectors=_META)
ROLE_BINDINGS = Resource(
    RBAC, ("v1",), "rolebindings", "RoleBinding", True, "rolebinding", field_selectors=_META
)
CLUSTER_ROLES = Resource(
    RBAC, ("v1",), "clusterroles", "ClusterRole", False, "clusterrole", field_selectors=_META
)
CLUSTER_ROLE_BINDINGS = Resource(
    RBAC,
    ("v1",),
    "clusterrolebindings",
    "ClusterRoleBinding",
    False,
    "clusterrolebinding",
    field_selectors=_META,
)
RBAC_RESOURCES = (ROLES, ROLE_BINDINGS, CLUSTER_ROLES, CLUSTER_ROLE_BINDINGS)

STORED: tuple[Resource, ...] = (
    PODS,
    NAMESPACES,
    NODES,
    CONFIGMAPS,
    SECRETS,
    SERVICE_ACCOUNTS,
    EVENTS,
    IMAGE_PULL_JOBS,
    NODE_IMAGES,
    CRRS,
    VALIDATING_ADMISSION_POLICIES,
    VALIDATING_ADMISSION_POLICY_BINDINGS,
    *RBAC_RESOURCES,
)


SERVED_ONLY: tuple[Resource, ...] = (
    POD_METRICS,
    NODE_METRICS,
    SELF_SUBJECT_ACCESS_REVIEWS,
    SELF_SUBJECT_RULES_REVIEWS,
    SELF_SUBJECT_REVIEWS,
)
"""served but not stored: metrics (metrics-server's API) and the self reviews, answered at once"""


def find(group: str, version: str, plural: str) -> Resource | None:
    """The stored resource served at group/version/plural, if any."""
    for res in STORED:
        if res.group == group and res.plural == plural and version in res.versions:
            return res
    return None


def groups() -> dict[str, tuple[str, ...]]:
    """Served API groups (excluding the legacy core group) and their versions, preferred first."""
    out: dict[str, tuple[str, ...]] = {}
    for res in (*STORED, *SERVED_ONLY):
        if res.group:
            out.setdefault(res.group, res.versions)
    # v1alpha1 first: v1beta1 stores ImagePullJob/NodeImage, but CRRs are served as v1alpha1 only
    return out
