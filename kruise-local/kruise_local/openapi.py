"""OpenAPI v2 and v3 documents for what the local cluster serves, generated, not written by hand.

Built-in kinds: from the Kubernetes OpenAPI definitions the `kubernetes-validate` package publishes per
release (the release modelled, `Features.schema_release`; `_definitions.json`: the swagger's definitions with
their descriptions and `x-kubernetes-*` patch/list/GVK extensions, rewritten as JSON schema), turned back into
OpenAPI (`type: [t, "null"]` -> `t`, `#/$defs/` refs -> `#/definitions/` or `#/components/schemas/`,
IntOrString/Quantity as the swagger writes them). Kruise kinds: from their CRDs (`crds/`), named and wrapped
as kube-apiserver's CRD OpenAPI builder does (`{reversed group}.{version}.{Kind}`, metadata -> ObjectMeta, a
`List` kind). Paths, operation ids, `x-kubernetes-action` and query parameters follow the API installer
(`apiserver/pkg/endpoints/installer.go` `registerResourceHandlers`; `endpoints/openapi`
`GetOperationIDAndTags`), so kubectl finds, e.g., `fieldValidation` on each PATCH (cli-runtime
`supportsQueryParamV3`)."""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from . import resources as R
from .features import NEWEST_MINOR, Features
from .resources import Resource

FIELD_MANAGER_RELEASE = Features(NEWEST_MINOR).schema_release
"""the release whose schemas the field manager merges with (`definitions_v3`)"""
CRD_FOLDER = Path(__file__).with_name("crds")
META = "io.k8s.apimachinery.pkg.apis.meta.v1."
_CORE_KINDS = {"Pod", "Namespace", "Node", "ConfigMap", "Event"}


def definition_name(res: Resource, version: str, kind: str | None = None) -> str:
    """The definition name of a served kind (`io.k8s.api.core.v1.Pod`, `io.kruise.apps.v1beta1.NodeImage`)."""
    kind = kind or res.kind
    if res.builtin:
        return f"io.k8s.api.{res.group.split('.')[0] or 'core'}.{version}.{kind}"
    reversed_group = ".".join(reversed(res.group.split(".")))
    return f"{reversed_group}.{version}.{kind}"


@lru_cache(maxsize=4)
def _k8s_definitions(release: str) -> dict[str, Any]:
    """The OpenAPI definitions of Kubernetes `release` (``v1.35.0``), as kubernetes-validate ships them."""
    spec = importlib.util.find_spec("kubernetes_validate")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "the local cluster needs kubernetes-validate (pip install airflow-kruise-chain[local])"
        )
    base = Path(next(iter(spec.submodule_search_locations)))
    path = base / "kubernetes-json-schema" / f"{release}-local" / "_definitions.json"
    return json.loads(path.read_text(encoding="utf-8"))["$defs"]


@lru_cache(maxsize=1)
def crds() -> dict[str, dict[str, Any]]:
    """The served Kruise CRDs by plural (`imagepulljobs`: the CustomResourceDefinition)."""
    out = {}
    for path in sorted(CRD_FOLDER.glob("*.yaml")):
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        out[doc["spec"]["names"]["plural"]] = doc
    return out


def crd_version(res: Resource, version: str) -> dict[str, Any]:
    """The CRD's entry for one served version of a Kruise resource."""
    for v in crds()[res.plural]["spec"]["versions"]:
        if v["name"] == version:
            return v
    raise KeyError(f"{res.plural} has no version {version}")


# -- schema conversion ------------------------------------------------------------------------------------
def _from_json_schema(node: Any, ref: str, in_properties: bool = False) -> Any:
    """kubernetes-validate's JSON schema back to the swagger's OpenAPI form."""
    if isinstance(node, list):
        return [_from_json_schema(v, ref) for v in node]
    if not isinstance(node, dict):
        return node
    if in_properties:  # keys are field names
        out = {k: _from_json_schema(v, ref) for k, v in node.items()}
        for meta_field in ("apiVersion", "kind"):  # kubernetes-validate pins these; the swagger does not
            if isinstance(out.get(meta_field), dict):
                out[meta_field].pop("enum", None)
        return out
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "type" and isinstance(value, list):
            value = next((t for t in value if t != "null"), "object")
        elif key == "$ref" and isinstance(value, str):
            value = ref + value.rsplit("/", 1)[-1]
        elif key == "oneOf":
            types = {t for alt in value for t in (alt.get("type") or []) if t != "null"}
            out["type"] = "string"
            if types == {"string", "integer"}:
                out["format"] = "int-or-string"
            continue
        else:
            value = _from_json_schema(value, ref, in_properties=key == "properties")
        out[key] = value
    return out


def _refs(node: Any, found: set[str]) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                found.add(value.rsplit("/", 1)[-1])
            else:
                _refs(value, found)
    elif isinstance(node, list):
        for value in node:
            _refs(value, found)


def _crd_schema(res: Resource, version: str, ref: str, v2: bool) -> dict[str, Any]:
    """A Kruise kind's schema from its CRD, as the CRD OpenAPI builder publishes it."""
    schema = copy.deepcopy(crd_version(res, version)["schema"]["openAPIV3Schema"])
    if v2:
        schema = _v2_structural(schema)
    props = schema.setdefault("properties", {})
    props["metadata"] = {
        "$ref": ref + META + "ObjectMeta",
        "description": "Standard object's metadata. More info: "
        "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata",
    }
    schema["x-kubernetes-group-version-kind"] = [{"group": res.group, "kind": res.kind, "version": version}]
    return schema


def _v2_structural(node: Any) -> Any:
    """OpenAPI v2 has no `nullable`, `anyOf`/`oneOf`; int-or-string fields lose their type, as the CRD
    builder's `ToStructuralOpenAPIV2` does."""
    if isinstance(node, list):
        return [_v2_structural(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _v2_structural(v) for k, v in node.items() if k not in ("nullable", "anyOf", "oneOf")}
    if out.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
    return out


def _list_schema(res: Resource, version: str, ref: str) -> dict[str, Any]:
    return {
        "description": f"{res.kind}List is a list of {res.kind}",
        "required": ["items"],
        "type": "object",
        "properties": {
            "apiVersion": {"description": "APIVersion of this list", "type": "string"},
            "items": {
                "description": f"List of {res.plural}.",
                "type": "array",
                "items": {"$ref": ref + definition_name(res, version)},
            },
            "kind": {"description": "Kind of this list", "type": "string"},
            "metadata": {"$ref": ref + META + "ListMeta", "description": "Standard list metadata."},
        },
        "x-kubernetes-group-version-kind": [
            {"group": res.group, "kind": f"{res.kind}List", "version": version}
        ],
    }


def _served(group: str | None = None, version: str | None = None) -> list[tuple[Resource, str]]:
    out = []
    for res in R.STORED:
        for v in res.versions:
            if (group is None or res.group == group) and (version is None or v == version):
                out.append((res, v))
    return out


def _definitions(served: list[tuple[Resource, str]], ref: str, v2: bool, release: str) -> dict[str, Any]:
    """Every definition the served kinds reach in Kubernetes `release`, plus the meta types every API
    serves."""
    k8s = _k8s_definitions(release)
    out: dict[str, Any] = {}
    wanted = {META + n for n in ("Status", "DeleteOptions", "WatchEvent", "Patch", "APIResourceList")}
    for res, version in served:
        if not res.builtin:
            out[definition_name(res, version)] = _crd_schema(res, version, ref, v2)
            out[definition_name(res, version, res.kind + "List")] = _list_schema(res, version, ref)
            wanted |= {META + "ObjectMeta", META + "ListMeta"}
        else:
            wanted |= {definition_name(res, version), definition_name(res, version, res.kind + "List")}
            if res is R.PODS:
                wanted.add("io.k8s.api.policy.v1.Eviction")
            if res is R.SERVICE_ACCOUNTS:
                wanted.add("io.k8s.api.authentication.v1.TokenRequest")
    todo = sorted(wanted)
    while todo:
        name = todo.pop()
        if name in out:
            continue
        out[name] = _from_json_schema(k8s[name], ref)
        found: set[str] = set()
        _refs(out[name], found)
        todo.extend(sorted(found - set(out)))
    return dict(sorted(out.items()))


def definitions_v3(res: Resource, version: str) -> dict[str, Any]:
    """The OpenAPI v3 schemas one served kind reaches (for the field manager)."""
    return _definitions([(res, version)], "#/components/schemas/", v2=False, release=FIELD_MANAGER_RELEASE)


# -- paths ------------------------------------------------------------------------------------------------
_LIST_PARAMS = (
    "allowWatchBookmarks",
    "continue",
    "fieldSelector",
    "labelSelector",
    "limit",
    "resourceVersion",
    "resourceVersionMatch",
    "sendInitialEvents",
    "timeoutSeconds",
    "watch",
)
_WRITE_PARAMS = ("dryRun", "fieldManager", "fieldValidation")
_DELETE_PARAMS = ("dryRun", "gracePeriodSeconds", "orphanDependents", "propagationPolicy")
_BOOL = {"allowWatchBookmarks", "sendInitialEvents", "watch", "orphanDependents", "force"}
_INT = {"limit", "timeoutSeconds", "gracePeriodSeconds"}
_PATCH_TYPES = [
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
]


def _op_prefix(res: Resource, version: str) -> str:
    """`CoreV1` / `AppsKruiseIoV1alpha1`: `GetOperationIDAndTags` with `ToValidOperationID`."""
    group = "core" if not res.group else res.group.removesuffix(".k8s.io")
    words = [w for part in group.replace("-", ".").split(".") for w in [part] if w]
    return "".join(w[:1].upper() + w[1:] for w in words) + version[:1].upper() + version[1:]


def _operation(
    res: Resource,
    version: str,
    verb: str,
    action: str,
    kind_part: str,
    params: tuple[str, ...],
    response: str,
    body: str | None = None,
    consumes: list[str] | None = None,
    gvk_kind: str | None = None,
) -> dict[str, Any]:
    op: dict[str, Any] = {
        "operationId": verb + _op_prefix(res, version) + kind_part,
        "tags": [_op_prefix(res, version).replace(version[:1].upper() + version[1:], "_" + version)],
        "parameters": [
            {"name": p, "in": "query", "type": _param_type(p), "uniqueItems": True} for p in params
        ],
        "responses": {"200": {"description": "OK", "schema": {"$ref": "#/definitions/" + response}}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {
            "group": res.group,
            "kind": gvk_kind or res.kind,
            "version": version,
        },
    }
    if body:
        op["parameters"].insert(
            0, {"name": "body", "in": "body", "required": True, "schema": {"$ref": "#/definitions/" + body}}
        )
    if consumes:
        op["consumes"] = consumes
    op["responses"]["401"] = {"description": "Unauthorized"}
    return op


def _param_type(name: str) -> str:
    return "boolean" if name in _BOOL else "integer" if name in _INT else "string"


_CREATE_ONLY = {"eviction": ("policy", "Eviction"), "token": ("authentication.k8s.io", "TokenRequest")}
"""subresources that only create an object of another group (group, kind), as `createNamespacedPodEviction`
and `createNamespacedServiceAccountToken`"""


def _paths(served: list[tuple[Resource, str]], hidden: frozenset[str]) -> dict[str, Any]:
    """The paths of the served kinds, without the `hidden` subresources (`pods/resize`)."""
    paths: dict[str, Any] = {}
    for res, version in served:
        root = f"/apis/{res.group}/{version}" if res.group else f"/api/{version}"
        scope = "Namespaced" if res.namespaced else ""
        coll = f"{root}/namespaces/{{namespace}}/{res.plural}" if res.namespaced else f"{root}/{res.plural}"
        item = coll + "/{name}"
        one, many = definition_name(res, version), definition_name(res, version, res.kind + "List")
        status = META + "Status"
        namespace_param = {"name": "namespace", "in": "path", "required": True, "type": "string"}
        path_params = [namespace_param] if res.namespaced else []
        name_param = [{"name": "name", "in": "path", "required": True, "type": "string"}]
        paths[coll] = {
            "get": _operation(res, version, "list", "list", scope + res.kind, _LIST_PARAMS, many),
            "post": _operation(res, version, "create", "post", scope + res.kind, _WRITE_PARAMS, one, one),
            "delete": _operation(
                res, version, "delete", "deletecollection", "Collection" + scope + res.kind,
                _DELETE_PARAMS + _LIST_PARAMS, status, META + "DeleteOptions",
            ),
            "parameters": path_params,
        }  # fmt: skip
        patch_params = (*_WRITE_PARAMS, "force")
        paths[item] = {
            "get": _operation(res, version, "read", "get", scope + res.kind, (), one),
            "put": _operation(res, version, "replace", "put", scope + res.kind, _WRITE_PARAMS, one, one),
            "patch": _operation(
                res,
                version,
                "patch",
                "patch",
                scope + res.kind,
                patch_params,
                one,
                META + "Patch",
                _PATCH_TYPES,
            ),
            "delete": _operation(
                res,
                version,
                "delete",
                "delete",
                scope + res.kind,
                _DELETE_PARAMS,
                one,
                META + "DeleteOptions",
            ),
            "parameters": path_params + name_param,
        }
        for sub in (s for s in res.subresources if f"{res.plural}/{s}" not in hidden):
            title = sub[:1].upper() + sub[1:]
            sub_path = f"{item}/{sub}"
            if sub == "log":
                op = _operation(res, version, "read", "get", scope + res.kind + "Log", (), one)
                op["produces"] = ["text/plain", "application/json", "application/yaml"]
                op["responses"]["200"]["schema"] = {"type": "string"}
                for p in ("container", "follow", "previous", "sinceSeconds", "tailLines", "timestamps"):
                    op["parameters"].append({"name": p, "in": "query", "type": "string", "uniqueItems": True})
                paths[sub_path] = {"get": op, "parameters": path_params + name_param}
            elif sub in ("exec", "attach"):  # connect GET (WebSocket) and POST (SPDY), as kube-apiserver
                ops: dict[str, Any] = {"parameters": path_params + name_param}
                gvk_kind = "PodExecOptions" if sub == "exec" else "PodAttachOptions"
                params = ("container", "stderr", "stdin", "stdout", "tty")
                for method in ("get", "post"):
                    op = _operation(res, version, "connect", "connect", "", (), one, gvk_kind=gvk_kind)
                    prefix = _op_prefix(res, version)
                    op["operationId"] = f"connect{method.title()}{prefix}{scope}{res.kind}{title}"
                    op["produces"] = ["*/*"]
                    op["responses"]["200"]["schema"] = {"type": "string"}
                    for p in (("command",) if sub == "exec" else ()) + params:
                        kind = "boolean" if p in ("stderr", "stdin", "stdout", "tty") else "string"
                        op["parameters"].append({"name": p, "in": "query", "type": kind, "uniqueItems": True})
                    ops[method] = op
                paths[sub_path] = ops
            elif sub in _CREATE_ONLY:  # a POST of another group's kind: pods/eviction, serviceaccounts/token
                group, kind = _CREATE_ONLY[sub]
                definition = f"io.k8s.api.{group.split('.')[0]}.v1.{kind}"
                kp = scope + res.kind + title
                op = _operation(
                    res, version, "create", "post", kp, _WRITE_PARAMS, definition, definition, gvk_kind=kind
                )
                op["x-kubernetes-group-version-kind"]["group"] = group
                paths[sub_path] = {"post": op, "parameters": path_params + name_param}
            else:  # status, resize: the object itself
                kp = scope + res.kind + title
                paths[sub_path] = {
                    "get": _operation(res, version, "read", "get", kp, (), one),
                    "put": _operation(res, version, "replace", "put", kp, _WRITE_PARAMS, one, one),
                    "patch": _operation(
                        res, version, "patch", "patch", kp, patch_params, one, META + "Patch", _PATCH_TYPES
                    ),
                    "parameters": path_params + name_param,
                }
        watch_coll = f"{root}/watch/namespaces/{{namespace}}/{res.plural}" if res.namespaced else None
        watch_coll = watch_coll or f"{root}/watch/{res.plural}"
        event = META + "WatchEvent"
        paths[watch_coll] = {
            "get": _operation(
                res, version, "watch", "watchlist", scope + res.kind + "List", _LIST_PARAMS, event
            ),
            "parameters": path_params,
        }
        paths[watch_coll + "/{name}"] = {
            "get": _operation(res, version, "watch", "watch", scope + res.kind, _LIST_PARAMS, event),
            "parameters": path_params + name_param,
        }
        if res.namespaced:
            all_ns = f"{root}/{res.plural}"
            paths[all_ns] = {
                "get": _operation(
                    res, version, "list", "list", res.kind + "ForAllNamespaces", _LIST_PARAMS, many
                )
            }
            paths[f"{root}/watch/{res.plural}"] = {
                "get": _operation(
                    res, version, "watch", "watchlist", res.kind + "ListForAllNamespaces", _LIST_PARAMS, event
                )
            }
    for path in paths.values():
        for op in path.values():
            if isinstance(op, dict):
                op.setdefault("consumes", ["*/*"])
                op["produces"] = op.get("produces") or [
                    "application/json",
                    "application/yaml",
                    "application/vnd.kubernetes.protobuf",
                ]
                op["schemes"] = ["https"]
    return dict(sorted(paths.items()))


# -- documents --------------------------------------------------------------------------------------------
def _info(version: str) -> dict[str, str]:
    """The documents' `info`: their version is the server's (`/version` gitVersion), as kube-apiserver's."""
    return {"title": "Kubernetes", "version": version}


@lru_cache(maxsize=2)
def v2_document(features: Features) -> bytes:
    """`/openapi/v2` (JSON) for everything the cluster stores, in the schemas of the version modelled."""
    served = _served()
    doc = {
        "swagger": "2.0",
        "info": _info(features.git_version),
        "paths": _paths(served, features.hidden_subresources),
        "definitions": _definitions(served, "#/definitions/", v2=True, release=features.schema_release),
        "securityDefinitions": {
            "BearerToken": {"type": "apiKey", "name": "authorization", "in": "header"},
        },
        "security": [{"BearerToken": []}],
    }
    return json.dumps(doc).encode()


@lru_cache(maxsize=2)
def v2_protobuf(features: Features) -> bytes:
    """`/openapi/v2` as gnostic's protobuf `openapi_v2.Document` (`openapi_pb.py`)."""
    from .openapi_pb import document

    return document(json.loads(v2_document(features)))


def v3_paths() -> list[str]:
    """The group-version documents `/openapi/v3` lists (`api/v1`, `apis/apps.kruise.io/v1beta1`, ...)."""
    out = {f"apis/{res.group}/{v}" if res.group else f"api/{v}" for res, v in _served()}
    return sorted(out)


@lru_cache(maxsize=32)
def v3_document(gv_path: str, features: Features) -> bytes | None:
    """`/openapi/v3/<api/v1|apis/group/version>`: one group-version's OpenAPI 3.0 document, or None."""
    parts = gv_path.strip("/").split("/")
    if parts[:1] == ["api"] and len(parts) == 2:
        group, version = "", parts[1]
    elif parts[:1] == ["apis"] and len(parts) == 3:
        group, version = parts[1], parts[2]
    else:
        return None
    served = _served(group, version)
    if not served:
        return None
    ref = "#/components/schemas/"
    doc = {
        "openapi": "3.0.0",
        "info": _info(features.git_version),
        "paths": {p: _v3_path(item) for p, item in _paths(served, features.hidden_subresources).items()},
        "components": {
            "schemas": _definitions(served, ref, v2=False, release=features.schema_release),
            "securitySchemes": {"BearerToken": {"type": "apiKey", "name": "authorization", "in": "header"}},
        },
    }
    return json.dumps(doc).encode()


def v3_hash(gv_path: str, features: Features) -> str:
    """The hash `/openapi/v3` publishes in each `serverRelativeURL` (clients cache by it)."""
    doc = v3_document(gv_path, features) or b""
    return hashlib.sha512(doc).hexdigest()[:128].upper()


def _v3_ref(node: Any) -> Any:
    if isinstance(node, dict):
        return {
            k: (v.replace("#/definitions/", "#/components/schemas/") if k == "$ref" else _v3_ref(v))
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_v3_ref(v) for v in node]
    return node


def _v3_param(p: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in p.items() if k not in ("type", "uniqueItems")}
    out["schema"] = {"type": p.get("type", "string"), "uniqueItems": True}
    return out


def _v3_path(item: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for method, op in item.items():
        if method == "parameters":
            out["parameters"] = [_v3_param(p) for p in op]
            continue
        new = {k: v for k, v in op.items() if k not in ("consumes", "produces", "schemes", "parameters")}
        params = []
        for p in op["parameters"]:
            if p["in"] == "body":
                media = op["consumes"] if op["consumes"] != ["*/*"] else ["*/*"]
                new["requestBody"] = {
                    "content": {m: {"schema": _v3_ref(p["schema"])} for m in media},
                    "required": True,
                }
            else:
                params.append(_v3_param(p))
        new["parameters"] = params
        responses = {}
        for code, resp in op["responses"].items():
            r = {"description": resp["description"]}
            if "schema" in resp:
                r["content"] = {m: {"schema": _v3_ref(resp["schema"])} for m in op["produces"]}
            responses[code] = r
        new["responses"] = responses
        out[method] = new
    return out
