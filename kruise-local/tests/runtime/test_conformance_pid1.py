"""A container's command is pid 1 of the container's own pid namespace, as runc makes it (`libcontainer/
standard_init_linux.go`: the container's init ends in an exec of the process), and the kernel's rules for a
namespace's init apply (pid_namespaces(7)): when pid 1 exits, every other process of the namespace is
killed; a signal from outside reaches pid 1 only if it has a handler for it (SIGKILL always). Driven through
the real `kubernetes` client."""

from __future__ import annotations

from kruise_local.testing import container, log_of, pod_body, running, status_of, wait_for

SHARED = [{"name": "shared", "emptyDir": {}}]
MOUNT = [{"name": "shared", "mountPath": "/shared"}]
# a background loop that outlives its shell if nothing ends it: it appends a line every 0.05 s
STARTS_A_LOOP = (
    'echo "pid=$$$$"; (while :; do echo beat >> /shared/beats; sleep 0.05; done) & '
    "while [ ! -s /shared/beats ]; do sleep 0.05; done; exit 3"
)
# the other container counts the lines, so the test reads through the API whether the loop still runs
COUNTS = 'while :; do echo "count=$$(wc -l < /shared/beats 2>/dev/null || echo 0)"; sleep 0.2; done'


def _counts(core, namespace: str) -> list[int]:
    return [
        int(line[6:]) for line in log_of(core, namespace, "p", "counter").splitlines() if line[:6] == "count="
    ]


def test_the_command_is_pid_1_and_nothing_it_started_outlives_it(core, namespace):
    body = pod_body(
        "p",
        container("main", STARTS_A_LOOP, volumeMounts=MOUNT),
        container("counter", COUNTS, volumeMounts=MOUNT),
        restart="Never",
        volumes=SHARED,
    )
    core.create_namespaced_pod(namespace, body)
    done = wait_for(
        lambda: (cs := status_of(core, namespace, "p", "main")) is not None and cs.state.terminated,
        timeout=60,
        what="main's exit",
    )
    assert done.exit_code == 3
    assert log_of(core, namespace, "p", "main").splitlines() == ["pid=1"]
    wait_for(lambda: running(core, namespace, "p", "counter"), timeout=60, what="the counter running")
    # the loop died with main's pid 1: the count stops growing (read across several of the counter's
    # readings, each 0.2 s apart, while the loop would have added about 4 lines per reading)
    seen = len(_counts(core, namespace))
    wait_for(lambda: len(_counts(core, namespace)) >= seen + 6, timeout=60, what="six more counts")
    counts = _counts(core, namespace)
    assert counts[-1] == counts[-6] > 0
