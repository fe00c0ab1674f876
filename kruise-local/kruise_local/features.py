"""One Kubernetes version and the behaviours it turns on (`Features`): the local cluster's only place that
knows what differs between Kubernetes minors. `/version`, the OpenAPI documents' `info.version`, the API
server's and the admission's version-gated rules and the kubelets read it (`LocalCluster.features`).

Each rule names the upstream change it follows:

- `in_place_resize`: the InPlacePodVerticalScaling feature gate is on by default from 1.33 (beta;
  `pkg/features/kube_features.go`, KEP-1287 "v1.33 updates for planned beta").
- `memory_limit_decrease`: a resize with the memory resize policy NotRequired may lower a container's memory
  limit from 1.34 (kubernetes/kubernetes#133012, milestone v1.34: `validatePodResizeContainerOrdering`'s
  "memory limits cannot be decreased unless resizePolicy is RestartContainer" removed, the kubelet's
  best-effort usage check in `kuberuntime_manager.go` `doPodResizeAction` added); 1.33 refuses it
  (kubernetes/kubernetes#130183, milestone v1.33).
- `websocket_upgrade_create`: AuthorizePodWebsocketUpgradeCreatePermission, beta and on by default from 1.35
  (`pkg/features/kube_features.go`): a WebSocket exec/attach/portforward needs `create` on the subresource.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

OLDEST_MINOR = 32
"""the oldest Kubernetes minor the local cluster models (1.32: in-place resize off by default)"""
NEWEST_MINOR = 35
"""the newest Kubernetes minor the local cluster models"""
_VERSION = re.compile(r"v?1\.(\d+)(?:\.(\d+))?")


@dataclass(frozen=True)
class Features:
    """Kubernetes 1.`minor`.`patch` and what it turns on."""

    minor: int
    patch: int = 0

    @classmethod
    def parse(cls, version: str) -> Features:
        """`1.35`, `1.35.2` or `v1.35.2`; ValueError naming the option and the supported minors otherwise."""
        found = _VERSION.fullmatch(version.strip())
        minor = int(found.group(1)) if found else -1
        if not OLDEST_MINOR <= minor <= NEWEST_MINOR:
            raise ValueError(
                f"kubernetes_version: {version!r} is not a Kubernetes version the local cluster models; use "
                f"one of {', '.join(f'1.{m}' for m in range(OLDEST_MINOR, NEWEST_MINOR + 1))} (e.g. 1.35.0)"
            )
        return cls(minor, int(found.group(2) or 0) if found else 0)

    @property
    def version(self) -> str:
        """``1.35.0``"""
        return f"1.{self.minor}.{self.patch}"

    @property
    def git_version(self) -> str:
        """What `/version` says (``gitVersion``) and the OpenAPI documents' ``info.version``."""
        return f"v{self.version}+kruise-local"

    @property
    def in_place_resize(self) -> bool:
        return self.minor >= 33

    @property
    def memory_limit_decrease(self) -> bool:
        return self.minor >= 34

    @property
    def websocket_upgrade_create(self) -> bool:
        return self.minor >= 35
