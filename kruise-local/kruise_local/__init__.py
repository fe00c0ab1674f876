"""kruise-local: an embedded Kubernetes + OpenKruise emulator for trying and testing the provider.

The provider never imports this package; it talks to it over HTTP like to any cluster.
"""

from .cluster import ClusterConfig, LocalCluster
from .pod_security import PodSecurityConfiguration

__all__ = ["ClusterConfig", "LocalCluster", "PodSecurityConfiguration"]
