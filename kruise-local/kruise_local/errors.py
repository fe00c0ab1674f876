"""Kubernetes API errors as `Status` objects."""

from __future__ import annotations

from typing import Any

_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    500: "InternalError",
}


class ApiError(Exception):
    """An error the API server answers with a `Status` body.

    `causes` are `{"reason": ..., "message": ..., "field": ...}` dicts, as the real server puts in
    `details.causes` of a 422 Invalid.
    """

    def __init__(
        self,
        code: int,
        message: str,
        *,
        reason: str | None = None,
        kind: str | None = None,
        name: str | None = None,
        group: str | None = None,
        causes: list[dict[str, str]] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or _REASONS.get(code, "Unknown")
        self.kind = kind
        self.name = name
        self.group = group
        self.causes = causes or []

    def status(self) -> dict[str, Any]:
        """The `Status` object for the response body."""
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        # every Status carries `details` (apimachinery's `NewNotFound`, `NewConflict`, `NewInvalid`... always
        # set it; kubectl debug dereferences it), its fields omitted when empty as Go's `omitempty` does
        details: dict[str, Any] = {}
        if self.name:
            details["name"] = self.name
        if self.group:
            details["group"] = self.group
        if self.kind:
            details["kind"] = self.kind
        if self.causes:
            details["causes"] = self.causes
        body["details"] = details
        return body


def not_found(kind: str, name: str, group: str = "") -> ApiError:
    plural = kind  # the real server names the resource plural here, e.g. pods "x" not found
    return ApiError(404, f'{plural} "{name}" not found', kind=kind, name=name, group=group)


def invalid(kind: str, name: str, causes: list[dict[str, str]], group: str = "") -> ApiError:
    """A 422 Invalid with the real server's message layout: `Kind "name" is invalid: field: msg`."""
    detail = "; ".join(f"{c['field']}: {c['message']}" if c.get("field") else c["message"] for c in causes)
    if len(causes) > 1:
        detail = (
            "["
            + ", ".join(f"{c['field']}: {c['message']}" if c.get("field") else c["message"] for c in causes)
            + "]"
        )
    return ApiError(
        422, f'{kind} "{name}" is invalid: {detail}', kind=kind, name=name, group=group, causes=causes
    )


def not_served() -> ApiError:
    """A path the server serves nothing at (a group, version, resource or subresource it does not have):
    `NewGenericServerResponse(404, ...)`'s Status (`apimachinery/pkg/api/errors`), with empty `details`, as
    kube-apiserver's not-found handler answers for an API group it was built without (apps, batch...)."""
    return ApiError(404, "the server could not find the requested resource")
