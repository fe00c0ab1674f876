"""Server-side Table output: kube printers' columns and cells, and CRD printer columns."""

from __future__ import annotations

import json
import urllib.request
from datetime import UTC, datetime, timedelta

import pytest
from kruise_local import printers
from kruise_local.testing import container, pod_body, wait_for

TABLE = (
    "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,"
    "application/json"
)


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (-5, "<invalid>"),
        (-1, "0s"),
        (0, "0s"),
        (119, "119s"),
        (120, "2m"),
        (150, "2m30s"),
        (600, "10m"),
        (3 * 3600 - 1, "179m"),
        (3 * 3600, "3h"),
        (7 * 3600 + 1800, "7h30m"),
        (47 * 3600, "47h"),
        (48 * 3600, "2d"),
        (49 * 3600, "2d1h"),
        (8 * 86400, "8d"),
        (2 * 365 * 86400, "2y"),
        (2 * 365 * 86400 + 86400, "2y1d"),
        (9 * 365 * 86400, "9y"),
    ],
)
def test_human_duration(seconds, shown):
    """apimachinery `duration.HumanDuration`."""
    assert printers.human_duration(seconds) == shown


def _ago(seconds: int) -> str:
    return (datetime.now(UTC) - timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _pod(statuses, phase="Running", init=None, init_statuses=None, **meta):
    return {
        "metadata": {"name": "p", "creationTimestamp": _ago(30), **meta},
        "spec": {
            "containers": [{"name": s["name"]} for s in statuses],
            "initContainers": init or [],
            "nodeName": "n1",
        },
        "status": {
            "phase": phase,
            "containerStatuses": statuses,
            "initContainerStatuses": init_statuses or [],
            "podIPs": [{"ip": "10.0.0.5"}],
            "conditions": [{"type": "Ready", "status": "True"}, {"type": "Initialized", "status": "True"}],
        },
    }


def test_print_pod_running_and_crash_looping():
    running = {"name": "a", "ready": True, "restartCount": 0, "state": {"running": {}}}
    looping = {
        "name": "b",
        "ready": False,
        "restartCount": 3,
        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
        "lastState": {"terminated": {"exitCode": 1, "finishedAt": _ago(200)}},
    }
    cells, conditions = printers.print_pod(_pod([running, looping]))
    assert cells == [
        "p",
        "1/2",
        "CrashLoopBackOff",
        "3 (3m20s ago)",
        "30s",
        "10.0.0.5",
        "n1",
        "<none>",
        "<none>",
    ]
    assert conditions == []


def test_print_pod_exit_code_completed_and_terminating():
    exited = {"name": "a", "ready": False, "restartCount": 0, "state": {"terminated": {"exitCode": 2}}}
    assert printers.print_pod(_pod([exited]))[0][2] == "ExitCode:2"
    done = {"name": "a", "ready": False, "restartCount": 0, "state": {"terminated": {"reason": "Completed"}}}
    cells, conditions = printers.print_pod(_pod([done], phase="Succeeded"))
    assert cells[2] == "Completed" and conditions[0]["reason"] == "Succeeded"
    running = {"name": "a", "ready": True, "restartCount": 0, "state": {"running": {}}}
    assert printers.print_pod(_pod([running], deletionTimestamp=_ago(0)))[0][2] == "Terminating"


def test_print_pod_initializing():
    waiting = {
        "name": "a",
        "ready": False,
        "restartCount": 0,
        "state": {"waiting": {"reason": "PodInitializing"}},
    }
    init_running = {"name": "i", "ready": False, "restartCount": 0, "state": {"running": {}}}
    pod = _pod([waiting], phase="Pending", init=[{"name": "i"}], init_statuses=[init_running])
    pod["status"]["conditions"] = []
    assert printers.print_pod(pod)[0][1:3] == ["0/1", "Init:0/1"]


def _get(cluster, path: str, accept: str = TABLE) -> dict:
    req = urllib.request.Request(f"{cluster.url}{path}", headers={"Accept": accept})
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.headers["Content-Type"] == "application/json"
        return json.loads(resp.read())


def test_pod_list_as_table(cluster, core, namespace):
    core.create_namespaced_pod(namespace, pod_body("p", container("c", "sleep 30")))
    wait_for(lambda: core.read_namespaced_pod("p", namespace).status.phase == "Running", what="Running")
    table = _get(cluster, f"/api/v1/namespaces/{namespace}/pods")
    assert (table["kind"], table["apiVersion"]) == ("Table", "meta.k8s.io/v1")
    names = [(c["name"], c["priority"]) for c in table["columnDefinitions"]]
    assert names == [
        ("Name", 0),
        ("Ready", 0),
        ("Status", 0),
        ("Restarts", 0),
        ("Age", 0),
        ("IP", 1),
        ("Node", 1),
        ("Nominated Node", 1),
        ("Readiness Gates", 1),
    ]
    (row,) = table["rows"]
    assert row["cells"][:4] == ["p", "1/1", "Running", "0"]
    assert row["object"]["kind"] == "PartialObjectMetadata" and row["object"]["metadata"]["name"] == "p"
    one = _get(cluster, f"/api/v1/namespaces/{namespace}/pods/p?includeObject=Object")
    assert one["rows"][0]["object"]["spec"]["containers"][0]["name"] == "c"


def test_plain_json_unless_a_table_is_asked_first(cluster, namespace):
    assert _get(cluster, f"/api/v1/namespaces/{namespace}/pods", "application/json")["kind"] == "PodList"
    mixed = "application/json, application/json;as=Table;v=v1;g=meta.k8s.io"
    assert _get(cluster, f"/api/v1/namespaces/{namespace}/pods", mixed)["kind"] == "PodList"


def test_configmap_namespace_and_node_columns(cluster, core, namespace):
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "c"}, "data": {"a": "1", "b": "2"}})
    cms = _get(cluster, f"/api/v1/namespaces/{namespace}/configmaps")
    assert [c["name"] for c in cms["columnDefinitions"]] == ["Name", "Data", "Age"]
    assert cms["rows"][0]["cells"][:2] == ["c", 2]
    ns = _get(cluster, f"/api/v1/namespaces/{namespace}")
    assert ns["rows"][0]["cells"][:2] == [namespace, "Active"]
    nodes = _get(cluster, "/api/v1/nodes")
    assert [c["name"] for c in nodes["columnDefinitions"]][:5] == [
        "Name",
        "Status",
        "Roles",
        "Age",
        "Version",
    ]
    assert nodes["rows"][0]["cells"][1:3] == ["Ready", "<none>"]


def test_image_pull_job_columns_come_from_its_crd(cluster, namespace):
    body = {
        "apiVersion": "apps.kruise.io/v1beta1",
        "kind": "ImagePullJob",
        "metadata": {"name": "j"},
        "spec": {"image": "busybox:1.36", "completionPolicy": {"type": "Always"}},
    }
    req = urllib.request.Request(
        f"{cluster.url}/apis/apps.kruise.io/v1beta1/namespaces/{namespace}/imagepulljobs",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    urllib.request.urlopen(req, timeout=30).close()
    path = f"/apis/apps.kruise.io/v1alpha1/namespaces/{namespace}/imagepulljobs"

    def done() -> dict | None:
        table = _get(cluster, path)
        return table if table["rows"][0]["cells"][3] == 1 else None

    table = wait_for(done, what="the job to succeed")
    columns = ["Name", "TOTAL", "ACTIVE", "SUCCEED", "FAILED", "AGE"]
    assert [c["name"] for c in table["columnDefinitions"]] == [*columns, "MESSAGE"]
    name, total, active, succeeded, failed, age, message = table["rows"][0]["cells"]
    assert (name, total, active, succeeded, failed) == ("j", 1, 0, 1, 0)
    assert age.endswith("s") and isinstance(message, str)
    # the v1beta1 version of the CRD has no MESSAGE column
    beta = _get(cluster, path.replace("v1alpha1", "v1beta1"))
    assert [c["name"] for c in beta["columnDefinitions"]] == columns


def test_watch_as_tables_sends_the_headers_once(cluster, core, namespace):
    """`kubectl get -w`: each event's object is a one-row Table, the column definitions only in the first."""
    for name in ("a", "b"):
        core.create_namespaced_config_map(namespace, {"metadata": {"name": name}, "data": {"k": "v"}})
    req = urllib.request.Request(
        f"{cluster.url}/api/v1/namespaces/{namespace}/configmaps?watch=true&timeoutSeconds=1",
        headers={"Accept": TABLE},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        events = [json.loads(line) for line in resp.read().decode().splitlines() if line.strip()]
    tables = [e["object"] for e in events if e["type"] == "ADDED"]
    assert [t["kind"] for t in tables] == ["Table", "Table"]
    assert [c["name"] for c in tables[0]["columnDefinitions"]] == ["Name", "Data", "Age"]
    assert "columnDefinitions" not in tables[1]
    assert [t["rows"][0]["cells"][:2] for t in tables] == [["a", 1], ["b", 1]]
