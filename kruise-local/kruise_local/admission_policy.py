"""ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1): CEL rules applied to the requests a
binding selects, as `k8s.io/apiserver/pkg/admission/plugin/policy/validating` evaluates them.

Per binding (in name order) whose policy exists: the request must match the policy's `matchConstraints` and
the binding's `matchResources` (`policy/matching/matching.go`: resourceRules with operations, groups,
versions, resources and subresources, scope and resourceNames, excludeResourceRules, namespaceSelector,
objectSelector), then every `matchCondition` must be true; `variables` are evaluated in order, then each
validation. A false validation with a `Deny` action refuses the request with its `messageExpression`,
`message` or `failed expression: <expression>`, and its `reason` (default Invalid, 422), worded as
`dispatcher.go` does: `<resource> "<name>" is forbidden: ValidatingAdmissionPolicy '<p>' with binding '<b>'
denied request: <msg>`. An expression that fails to evaluate follows `failurePolicy` (Fail by default). The
CEL variables are `object`, `oldObject` (null on CREATE / DELETE respectively), `request` (an
AdmissionRequest), `params`, `namespaceObject` and `variables`. Requests for the policy and binding types
themselves are exempt, as upstream exempts admission configuration. `Warn` adds a `Warning` header, `Audit`
is only logged (there is no audit log).

CEL is evaluated by cel-python (`celpy`), a maintained implementation of the CEL specification; the Kubernetes
CEL libraries (`authorizer`, quantity, url, regex extensions) are not available.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import celpy
from celpy import celtypes

from . import resources as R
from .errors import ApiError, invalid
from .resources import Resource
from .selectors import LabelSelector
from .store import Obj, Store

log = logging.getLogger(__name__)

_REASON_CODES = {"Unauthorized": 401, "Forbidden": 403, "Invalid": 422, "RequestEntityTooLarge": 413}
_EXEMPT = (R.VALIDATING_ADMISSION_POLICIES, R.VALIDATING_ADMISSION_POLICY_BINDINGS)
_OPERATIONS = {"CREATE", "UPDATE", "DELETE", "CONNECT", "*"}


@dataclass(frozen=True)
class Attributes:
    """One admission request, as `admission.Attributes` carries it."""

    operation: str  # CREATE, UPDATE or DELETE
    resource: Resource
    version: str
    subresource: str
    namespace: str
    name: str
    obj: Obj | None
    old: Obj | None
    user: dict[str, Any] = field(default_factory=dict)
    dry_run: bool = False
    warnings: list[str] | None = None
    """where `Warn` actions add their message (the response's Warning headers)"""


class _EvalError(Exception):
    pass


class CelPrograms:
    """Compiled CEL programs, cached by expression."""

    def __init__(self) -> None:
        self.env = celpy.Environment()
        self._cache: dict[str, Any] = {}

    def compile(self, expression: str) -> Any:
        program = self._cache.get(expression)
        if program is None:
            program = self.env.program(self.env.compile(expression))
            if len(self._cache) > 4096:
                self._cache.clear()
            self._cache[expression] = program
        return program

    def evaluate(self, expression: str, activation: dict[str, Any]) -> Any:
        try:
            result = self.compile(expression).evaluate(activation)
        except celpy.CELParseError as e:
            raise _EvalError(f"compilation failed: {e}") from None
        except celpy.CELEvalError as e:
            raise _EvalError(str(e.args[0] if e.args else e)) from None
        except (RecursionError, TypeError, ValueError, KeyError, ZeroDivisionError) as e:
            raise _EvalError(f"{type(e).__name__}: {e}") from None
        if isinstance(result, celpy.CELEvalError):
            raise _EvalError(str(result.args[0] if result.args else result))
        return result


def _cel(value: Any) -> Any:
    return celpy.json_to_cel(value)


def _rule_matches(rule: dict[str, Any], a: Attributes) -> bool:
    """One `RuleWithOperations` (`policy/matching/matching.go` with `rules.Matcher`)."""
    ops = rule.get("operations") or []
    if "*" not in ops and a.operation not in ops:
        return False
    groups, versions = rule.get("apiGroups") or [], rule.get("apiVersions") or []
    if "*" not in groups and a.resource.group not in groups:
        return False
    if "*" not in versions and a.version not in versions:
        return False
    scope = rule.get("scope") or "*"
    if (scope == "Cluster" and a.resource.namespaced) or (
        scope == "Namespaced" and not a.resource.namespaced
    ):
        return False
    wanted = a.resource.plural + ("/" + a.subresource if a.subresource else "")
    matched = False
    for entry in rule.get("resources") or []:
        if entry in ("*/*", wanted):
            matched = True
        elif entry == "*" and not a.subresource:
            matched = True
        elif "/" in entry:
            res, _, sub = entry.partition("/")
            if a.subresource and (res in ("*", a.resource.plural)) and sub in ("*", a.subresource):
                matched = True
        if matched:
            break
    if not matched:
        return False
    names = rule.get("resourceNames") or []
    return not names or a.name in names


class PolicyAdmission:
    """Serves the ValidatingAdmissionPolicy plugin for every resource the local cluster stores."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.cel = CelPrograms()

    # -- validation of the policy objects themselves -------------------------------------------------
    def validate(self, res: Resource, obj: Obj) -> None:
        """422 for a policy or binding the real server would refuse: missing fields, bad enums, CEL that
        does not compile (`ValidateValidatingAdmissionPolicy`, `...Binding`)."""
        name = str((obj.get("metadata") or {}).get("name", ""))
        spec = obj.get("spec")
        causes: list[dict[str, str]] = []

        def bad(path: str, message: str) -> None:
            causes.append({"reason": "FieldValueInvalid", "message": message, "field": path})

        if not isinstance(spec, dict):
            bad("spec", "Required value")
            raise invalid(res.kind, name, causes, group=res.group)
        if res is R.VALIDATING_ADMISSION_POLICY_BINDINGS:
            if not isinstance(spec.get("policyName"), str) or not spec.get("policyName"):
                bad("spec.policyName", "Required value")
            actions = spec.get("validationActions")
            if not isinstance(actions, list) or not actions:
                bad("spec.validationActions", "Required value")
            elif any(x not in ("Deny", "Warn", "Audit") for x in actions):
                bad("spec.validationActions", 'supported values: "Audit", "Deny", "Warn"')
            elif "Deny" in actions and "Warn" in actions:
                bad("spec.validationActions", "Deny and Warn may not be used together")
            self._check_match(spec.get("matchResources"), "spec.matchResources", bad, required=False)
        else:
            if spec.get("failurePolicy", "Fail") not in ("Fail", "Ignore"):
                bad("spec.failurePolicy", 'supported values: "Fail", "Ignore"')
            self._check_match(spec.get("matchConstraints"), "spec.matchConstraints", bad, required=True)
            for key in ("matchConditions", "variables", "validations"):
                items = spec.get(key) or []
                if not isinstance(items, list):
                    bad(f"spec.{key}", "must be a list")
                    continue
                for i, item in enumerate(items):
                    where = f"spec.{key}[{i}]"
                    if not isinstance(item, dict) or not isinstance(item.get("expression"), str):
                        bad(f"{where}.expression", "Required value")
                        continue
                    self._check_expression(item["expression"], f"{where}.expression", bad)
                    if isinstance(item.get("messageExpression"), str):
                        self._check_expression(item["messageExpression"], f"{where}.messageExpression", bad)
                    if key != "validations" and not isinstance(item.get("name"), str):
                        bad(f"{where}.name", "Required value")
                    reason = item.get("reason")
                    if key == "validations" and reason is not None and reason not in _REASON_CODES:
                        bad(
                            f"{where}.reason",
                            'supported values: "Forbidden", "Invalid", '
                            '"RequestEntityTooLarge", "Unauthorized"',
                        )
            if not spec.get("validations") and not spec.get("auditAnnotations"):
                bad(
                    "spec.validations",
                    "Required value: validations or auditAnnotations must contain at least one item",
                )
        if causes:
            raise invalid(res.kind, name, causes, group=res.group)

    def _check_expression(self, expression: str, path: str, bad: Any) -> None:
        try:
            self.cel.compile(expression)
        except Exception as e:  # celpy raises its parse errors and a few others for bad syntax
            bad(path, f"Invalid value: {expression!r}: compilation failed: {e}")

    @staticmethod
    def _check_match(match: Any, path: str, bad: Any, *, required: bool) -> None:
        if match is None:
            if required:
                bad(path, "Required value")
            return
        if not isinstance(match, dict):
            bad(path, "must be an object")
            return
        rules = match.get("resourceRules")
        if required and not rules:
            bad(f"{path}.resourceRules", "Required value")
        for key in ("resourceRules", "excludeResourceRules"):
            for i, rule in enumerate(match.get(key) or []):
                if not isinstance(rule, dict):
                    bad(f"{path}.{key}[{i}]", "must be an object")
                    continue
                ops = rule.get("operations") or []
                if not ops or any(op not in _OPERATIONS for op in ops):
                    bad(
                        f"{path}.{key}[{i}].operations",
                        'supported values: "*", "CONNECT", "CREATE", "DELETE", "UPDATE"',
                    )
                for field_name in ("apiGroups", "apiVersions", "resources"):
                    if not rule.get(field_name):
                        bad(f"{path}.{key}[{i}].{field_name}", "Required value")
        for key in ("namespaceSelector", "objectSelector"):
            if match.get(key) is not None:
                try:
                    LabelSelector.from_object(match[key])
                except ApiError as e:
                    bad(f"{path}.{key}", e.message)

    # -- admission ------------------------------------------------------------------------------------
    def admit(self, a: Attributes) -> None:
        """Raise the refusal of the first binding that denies the request; return when all admit it."""
        if a.resource in _EXEMPT:
            return
        store = self.store
        bindings = sorted(
            store.items(R.VALIDATING_ADMISSION_POLICY_BINDINGS), key=lambda b: b["metadata"]["name"]
        )
        if not bindings:
            return
        namespace_obj = store.peek(R.NAMESPACES, "", a.namespace) if a.namespace else None
        for binding in bindings:
            spec = binding.get("spec") or {}
            policy = store.peek(R.VALIDATING_ADMISSION_POLICIES, "", spec.get("policyName") or "")
            if policy is None:
                continue
            pspec = policy.get("spec") or {}
            if not self._matches(pspec.get("matchConstraints"), a, namespace_obj, constrain=True):
                continue
            if spec.get("matchResources") is not None and not self._matches(
                spec["matchResources"], a, namespace_obj, constrain=False
            ):
                continue
            self._evaluate(policy, binding, a, namespace_obj)

    def _matches(self, match: Any, a: Attributes, namespace_obj: Obj | None, *, constrain: bool) -> bool:
        if not isinstance(match, dict):
            return False
        ns_selector = match.get("namespaceSelector")
        if ns_selector:
            if a.resource.namespaced:
                labels = ((namespace_obj or {}).get("metadata") or {}).get("labels")
            elif a.resource is R.NAMESPACES:
                labels = ((a.obj or a.old or {}).get("metadata") or {}).get("labels")
            else:
                labels = None  # other cluster-scoped objects are never excluded by a namespace selector
            if (a.resource.namespaced or a.resource is R.NAMESPACES) and not LabelSelector.from_object(
                ns_selector
            ).matches(labels):
                return False
        obj_selector = match.get("objectSelector")
        if obj_selector:
            selector = LabelSelector.from_object(obj_selector)
            if not any(
                selector.matches(((o or {}).get("metadata") or {}).get("labels"))
                for o in (a.obj, a.old)
                if o is not None
            ):
                return False
        rules = match.get("resourceRules") or []
        if (rules or constrain) and not any(_rule_matches(r, a) for r in rules):
            return False
        return not any(_rule_matches(r, a) for r in match.get("excludeResourceRules") or [])

    def _request(self, a: Attributes) -> dict[str, Any]:
        gvk = {"group": a.resource.group, "version": a.version, "kind": a.resource.kind}
        gvr = {"group": a.resource.group, "version": a.version, "resource": a.resource.plural}
        user = {"username": "", "groups": [], "extra": {}, "uid": "", **a.user}
        return {
            "kind": gvk,
            "resource": gvr,
            "subResource": a.subresource,
            "requestKind": gvk,
            "requestResource": gvr,
            "requestSubResource": a.subresource,
            "name": a.name,
            "namespace": a.namespace,
            "operation": a.operation,
            "userInfo": user,
            "dryRun": a.dry_run,
        }

    def _params(self, policy: Obj, binding: Obj, a: Attributes) -> list[Obj | None] | str:
        """The param objects a binding refers to; a message when none is found and the action is Deny."""
        kind = (policy.get("spec") or {}).get("paramKind")
        ref = (binding.get("spec") or {}).get("paramRef")
        if not kind or not ref:
            return [None]
        group = str(kind.get("apiVersion", "")).rpartition("/")[0]
        res = next((r for r in R.STORED if r.group == group and r.kind == kind.get("kind")), None)
        found: list[Obj | None] = []
        if res is not None:
            ns = (ref.get("namespace") or a.namespace) if res.namespaced else ""
            if ref.get("name"):
                obj = self.store.peek(res, ns, ref["name"])
                found = [obj] if obj is not None else []
            elif ref.get("selector") is not None:
                found = list(self.store.list(res, ns or None, LabelSelector.from_object(ref["selector"])))
        if found:
            return found
        if ref.get("parameterNotFoundAction", "Deny") == "Allow":
            return []
        return "no params found for policy binding with `Deny` parameterNotFoundAction"

    def _evaluate(self, policy: Obj, binding: Obj, a: Attributes, namespace_obj: Obj | None) -> None:
        pspec = policy.get("spec") or {}
        actions = (binding.get("spec") or {}).get("validationActions") or []
        fail = pspec.get("failurePolicy", "Fail") == "Fail"
        params = self._params(policy, binding, a)
        if isinstance(params, str):
            if fail and "Deny" in actions:
                self._deny(policy, binding, a, params, "Invalid")
            return
        base = {
            "object": _cel(a.obj),
            "oldObject": _cel(a.old),
            "request": _cel(self._request(a)),
            "namespaceObject": _cel(namespace_obj),
        }
        for param in params:
            activation = {**base, "params": _cel(param)}
            try:
                if not self._conditions_hold(pspec.get("matchConditions") or [], activation):
                    continue
            except _EvalError as e:
                if fail and "Deny" in actions:
                    self._deny(policy, binding, a, str(e), "Invalid")
                continue
            variables: dict[str, Any] = {}
            activation["variables"] = celtypes.MapType({})
            for var in pspec.get("variables") or []:
                try:
                    variables[var["name"]] = self.cel.evaluate(var["expression"], activation)
                except _EvalError as e:
                    variables[var["name"]] = celpy.CELEvalError(str(e))
                activation["variables"] = celtypes.MapType(
                    {celtypes.StringType(k): v for k, v in variables.items()}
                )
            for check in pspec.get("validations") or []:
                message = self._check(check, activation, fail)
                if message is None:
                    continue
                if "Deny" in actions:
                    self._deny(policy, binding, a, message, check.get("reason") or "Invalid")
                if "Warn" in actions and a.warnings is not None:
                    a.warnings.append(
                        f"Validation failed for ValidatingAdmissionPolicy '{policy['metadata']['name']}' "
                        f"with binding '{binding['metadata']['name']}': {message}"
                    )
                if "Audit" in actions:
                    log.info("ValidatingAdmissionPolicy %r audit: %s", policy["metadata"]["name"], message)

    def _conditions_hold(self, conditions: list[dict[str, Any]], activation: dict[str, Any]) -> bool:
        """False when a condition is false; an evaluation error (after every false is known) raises."""
        error: _EvalError | None = None
        for cond in conditions:
            try:
                result = self.cel.evaluate(cond["expression"], activation)
            except _EvalError as e:
                error = error or _EvalError(f"matchCondition {cond.get('name')!r}: {e}")
                continue
            if not isinstance(result, celtypes.BoolType):
                error = error or _EvalError(f"matchCondition {cond.get('name')!r} did not evaluate to a bool")
            elif not result:
                return False
        if error is not None:
            raise error
        return True

    def _check(self, check: dict[str, Any], activation: dict[str, Any], fail: bool) -> str | None:
        """The refusal message of one validation, or None when it passes (or errs under Ignore)."""
        expression = check["expression"]
        try:
            result = self.cel.evaluate(expression, activation)
            if not isinstance(result, celtypes.BoolType):
                raise _EvalError("expression did not evaluate to a bool")
        except _EvalError as e:
            return f"expression '{expression}' resulted in error: {e}" if fail else None
        if result:
            return None
        if isinstance(check.get("messageExpression"), str):
            try:
                text = self.cel.evaluate(check["messageExpression"], activation)
                if isinstance(text, str) and text.strip() and "\n" not in text:
                    return str(text)
            except _EvalError as e:
                log.info("messageExpression %r failed: %s", check["messageExpression"], e)
        if check.get("message"):
            return str(check["message"])
        return f"failed expression: {expression}"

    @staticmethod
    def _deny(policy: Obj, binding: Obj, a: Attributes, message: str, reason: str) -> None:
        text = (
            f"ValidatingAdmissionPolicy '{policy['metadata']['name']}' with binding "
            f"'{binding['metadata']['name']}' denied request: {message}"
        )
        what = a.resource.plural + (f".{a.resource.group}" if a.resource.group else "")
        raise ApiError(
            _REASON_CODES.get(reason, 422),
            f'{what} "{a.name}" is forbidden: {text}',
            reason=reason,
            kind=a.resource.plural,
            name=a.name,
            group=a.resource.group,
            causes=[{"message": text}],
        )
