"""`[core] hostname_callable` for the production-shaped test deployment: each Celery worker is given a
hostname of its own (KRUISE_CHAIN_TEST_HOSTNAME), as a worker on another machine has; elsewhere the
machine's FQDN."""

from __future__ import annotations

import os
import socket


def hostname() -> str:
    return os.environ.get("KRUISE_CHAIN_TEST_HOSTNAME") or socket.getfqdn()
