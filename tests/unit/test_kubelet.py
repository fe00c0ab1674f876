"""Unit tests of the local kubelet's pure rules."""

from __future__ import annotations

from airflow_kruise_chain.local.kubelet import spec_hash


def test_container_hash_covers_only_name_and_image() -> None:
    base = {"name": "c", "image": "busybox:1.36", "command": ["sleep", "1"]}
    same = [
        {**base, "command": ["true"]},
        {**base, "env": [{"name": "A", "value": "1"}]},
        {**base, "resources": {"limits": {"memory": "1Gi"}}},
        {**base, "args": ["x"], "workingDir": "/tmp"},
    ]
    assert {spec_hash(c) for c in same} == {spec_hash(base)}
    assert spec_hash({**base, "image": "busybox:1.37"}) != spec_hash(base)
    assert spec_hash({**base, "name": "d"}) != spec_hash(base)
