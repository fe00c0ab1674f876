"""The preflight's `seal` check: the gVisor runtime classes and the nodes on Linux before 5.7 the API shows,
where a stage could read its runner (docs/security.md); what only a node shows, the runner's init container
checks (tests/unit/test_core_seal_probe.py)."""

from __future__ import annotations

from typing import Any

from airflow_kruise_chain.preflight import OK, WARN
from airflow_kruise_chain.preflight.checks import seal


class _Api:
    """What `seal` reads: path -> (status, body)."""

    def __init__(self, answers: dict[str, tuple[int, Any]]) -> None:
        self.answers = answers

    def get(self, path: str) -> tuple[int, Any]:
        return self.answers.get(path, (404, {}))


def _node(name: str, kernel: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"nodeInfo": {"kernelVersion": kernel}}}


def test_gvisor_classes_and_old_kernels_are_named() -> None:
    api = _Api(
        {
            "/apis/node.k8s.io/v1/runtimeclasses": (
                200,
                {
                    "items": [
                        {"metadata": {"name": "gvisor"}, "handler": "runsc"},
                        {"metadata": {"name": "kata"}, "handler": "kata"},
                    ]
                },
            ),
            "/api/v1/nodes": (200, {"items": [_node("a", "5.4.0-1051-azure"), _node("b", "6.1.0-18-amd64")]}),
        }
    )
    found = seal(api)  # type: ignore[arg-type]
    assert found.status == WARN
    assert "runtime classes gvisor run gVisor" in found.detail and "kata" not in found.detail
    assert "a (5.4.0-1051-azure)" in found.detail and "b (" not in found.detail
    assert "runtime_class_name" in found.fix


def test_what_it_cannot_read_is_left_to_the_runners_init_container() -> None:
    found = seal(_Api({"/apis/node.k8s.io/v1/runtimeclasses": (403, {}), "/api/v1/nodes": (403, {})}))  # type: ignore[arg-type]
    assert found.status == OK and "cannot read runtime classes (403) or nodes (403)" in found.detail
    assert "each chain's setup checks its node" in found.detail
    clean = _Api({"/api/v1/nodes": (200, {"items": [_node("a", "6.18.44")]})})
    assert seal(clean).status == OK  # type: ignore[arg-type]
