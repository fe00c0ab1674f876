"""Watch memory: many watchers that never read, and large updates, hold the server to a bound (issue 25.8).

The cluster runs in its own process (`kruise-local up`) so its resident memory is its own. The bound is the
one `kruise-local/README.md` states; kube-apiserver keeps it by serializing an event once for all watchers and
by blocking a stalled watcher's writer on its socket (`watches.py`).
"""

from __future__ import annotations

import json
import select
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

WATCHERS = 2000
UPDATES = 150
OBJECT_BYTES = 200 * 1024
GROWTH_BOUND_MIB = 150
"""what 2,000 stalled watchers and 150 updates of a 200 KB object may add to the server's peak RSS"""


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kruise_local", "--home", str(home), *args],
        capture_output=True,
        text=True,
        timeout=90,
    )


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for {pid}")


def _request(url: str, method: str, body: dict | None = None) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())


@pytest.fixture
def server(tmp_path):
    home = tmp_path / "kl"
    up = _cli(home, "up")
    assert up.returncode == 0, up.stderr
    try:
        state = json.loads((home / "state.json").read_text())
        yield state["url"], int(state["pid"])
    finally:
        _cli(home, "down")


ROUNDS = 3
ROUND_GROWTH_BOUND_MIB = 20
"""what rounds 2 and 3 together may add to the RSS the server settles at after round 1: the watch history
keeps at most `HISTORY_BYTES` (16 MiB) of a resource's versions, so the rounds replace, not add (before the
byte budget: +30 MiB a round)"""


def _round(url: str, pid: int, first: int) -> int:
    """2,000 watchers that never read, 150 updates of a 200 KB ConfigMap, the watchers closed; returns the
    server's peak RSS (KiB) during the round."""
    base = f"{url}/api/v1/namespaces/default/configmaps"
    host, port = urllib.parse.urlparse(url).netloc.split(":")
    socks = []
    try:
        for _ in range(WATCHERS):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a client that never reads
            s.connect((host, int(port)))
            s.sendall(
                f"GET {urllib.parse.urlparse(base).path}?watch=true HTTP/1.1\r\nHost: x\r\n\r\n".encode()
            )
            socks.append(s)
        poll = select.poll()
        for s in socks:
            poll.register(s, select.POLLIN)
        answered, deadline = set(), time.monotonic() + 120
        while len(answered) < WATCHERS and time.monotonic() < deadline:  # answered: its watcher is registered
            for fd, _ in poll.poll(1000):
                answered.add(fd)
                poll.unregister(fd)
        assert len(answered) == WATCHERS, f"{WATCHERS - len(answered)} watches not answered"
        cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big"}}
        for i in range(first, first + UPDATES):
            cm["data"] = {"v": str(i % 10) * OBJECT_BYTES}
            _request(f"{base}/big", "PUT", cm)
        return _status_kib(pid, "VmHWM")
    finally:
        for s in socks:
            s.close()


def test_stalled_watchers_and_large_updates_stay_bounded(server):
    url, pid = server
    base = f"{url}/api/v1/namespaces/default/configmaps"
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "big"},
        "data": {"v": "0" * OBJECT_BYTES},
    }
    _request(base, "POST", cm)
    before = _status_kib(pid, "VmRSS")
    settled = []
    for n in range(ROUNDS):
        peak = _round(url, pid, n * UPDATES)
        if n == 0:
            assert (peak - before) / 1024 < GROWTH_BOUND_MIB, (
                f"peak RSS grew by {(peak - before) / 1024:.0f} MiB"
            )
        # the watches end with their connections; the server goes on serving
        last = str((n * UPDATES + UPDATES - 1) % 10)
        assert _request(f"{base}/big", "GET")["data"]["v"].startswith(last)
        time.sleep(1)
        settled.append(_status_kib(pid, "VmRSS"))
    growth = (settled[-1] - settled[0]) / 1024
    print(f"RSS before {before // 1024} MiB, after each round {[s // 1024 for s in settled]} MiB")
    assert growth < ROUND_GROWTH_BOUND_MIB, f"rounds 2-{ROUNDS} added {growth:.0f} MiB"
