"""`kruise-local up|down|status|serve`: run the local cluster in the background or in the foreground."""

from __future__ import annotations

import argparse
import json
import os
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

DEFAULT_STATE = Path(os.environ.get("KRUISE_LOCAL_HOME", Path.cwd() / ".kruise-local"))


def _add_cluster_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profile", choices=["fast", "realistic"], default="fast", help="modeled latencies")
    p.add_argument("--nodes", type=int, default=1, help="number of nodes (default 1)")
    p.add_argument("--catalogue", help="image catalogue YAML (default: the one shipped with the package)")
    p.add_argument(
        "--permissive-images",
        action="store_true",
        help="run any image reference missing from the catalogue as a generic image with the host's tools",
    )
    p.add_argument(
        "--port", type=int, default=0, help="API server port on 127.0.0.1 (default: any free port)"
    )
    p.add_argument(
        "--no-image-pull-job-gate",
        action="store_true",
        help="run with OpenKruise's ImagePullJobGate off, as OpenKruise installs by default",
    )
    p.add_argument("--sandbox", choices=["auto", "oci", "bwrap", "unshare", "none"], default="auto")
    p.add_argument(
        "--authorization-mode",
        choices=["AlwaysAllow", "RBAC"],
        default="AlwaysAllow",
        help="kube-apiserver's --authorization-mode: RBAC authorizes every request by the cluster's Roles "
        "and bindings (default AlwaysAllow: every request allowed)",
    )
    p.add_argument(
        "--tls",
        action="store_true",
        help="serve HTTPS with a self-signed CA (in the kubeconfig; ca.crt in the state folder): kubectl "
        "sends a bearer token (`kubectl create token`) over TLS only",
    )
    p.add_argument(
        "--kubernetes-version",
        type=_kubernetes_version,
        default="1.35.0",
        metavar="VERSION",
        help="the Kubernetes version modelled, 1.32 to 1.35 (default 1.35.0): /version, OpenAPI and "
        "version-gated rules such as lowering a memory limit in place (1.34+)",
    )
    p.add_argument(
        "--feature-gates",
        default="",
        metavar="GATES",
        help="feature gates set against the version's defaults, as the kubelet's and kube-apiserver's "
        "--feature-gates: A=true,B=false (InPlacePodVerticalScaling, KubeletCrashLoopBackOffMax, "
        "ReduceDefaultCrashLoopBackOffDecay, AuthorizePodWebsocketUpgradeCreatePermission, "
        "KubeletEnsureSecretPulledImages)",
    )
    p.add_argument(
        "--max-container-restart-period",
        type=_restart_period,
        default=None,
        metavar="SECONDS",
        help="the nodes' kubelet setting crashLoopBackOff.maxContainerRestartPeriod: the crash-loop "
        "back-off's maximum, 1-300 s (default unset: 300 s); needs KubeletCrashLoopBackOffMax (on by "
        "default from 1.35)",
    )
    p.add_argument(
        "--serialize-image-pulls",
        type=_bool,
        default=None,
        metavar="true|false",
        help="the nodes' kubelet setting serializeImagePulls: one image pull at a time per node, every pod's "
        "pulls in one queue (default unset: true, false when --max-parallel-image-pulls is 2 or more)",
    )
    p.add_argument(
        "--max-parallel-image-pulls",
        type=int,
        default=None,
        metavar="N",
        help="the nodes' kubelet setting maxParallelImagePulls: at most N pulls at once per node (default "
        "unset: no limit once pulls are parallel); above 1 only with --serialize-image-pulls false or unset",
    )


def _bool(text: str) -> bool:
    """`strconv.ParseBool`, as the kubelet's boolean flags read their value."""
    if text in ("1", "t", "T", "true", "TRUE", "True"):
        return True
    if text in ("0", "f", "F", "false", "FALSE", "False"):
        return False
    raise argparse.ArgumentTypeError(f"invalid boolean value {text!r}: use true or false")


def _kubernetes_version(text: str) -> str:
    from .features import Features

    try:
        return Features.parse(text).version
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _check_cluster_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The version, the gates and the kubelet settings together, as `ClusterConfig` checks them."""
    from .features import Features
    from .image_puller import image_pull_settings

    try:
        Features.parse(args.kubernetes_version, args.feature_gates).crash_loop_backoff(
            args.max_container_restart_period
        )
        image_pull_settings(args.serialize_image_pulls, args.max_parallel_image_pulls)
    except ValueError as e:
        parser.error(str(e))


def _restart_period(text: str) -> float:
    from .backoff import check_max_container_restart_period

    try:
        return check_max_container_restart_period(float(text))
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _state_file(home: Path) -> Path:
    return home / "state.json"


def _read_state(home: Path) -> dict | None:
    try:
        return json.loads(_state_file(home).read_text())
    except (OSError, ValueError):
        return None


def _alive(state: dict) -> bool:
    context = ssl.create_default_context(cafile=state["ca"]) if state.get("ca") else None
    try:
        with urllib.request.urlopen(state["url"] + "/readyz", timeout=2, context=context) as r:
            return r.status == 200
    except OSError:
        return False


def serve(args: argparse.Namespace) -> int:
    """Run the cluster in the foreground until SIGTERM/SIGINT."""
    from .cluster import ClusterConfig, LocalCluster

    home = Path(args.home)
    home.mkdir(parents=True, exist_ok=True)
    cluster = LocalCluster(
        ClusterConfig(
            profile=args.profile,
            nodes=args.nodes,
            catalogue=args.catalogue,
            port=args.port,
            sandbox=args.sandbox,
            image_pull_job_gate=not args.no_image_pull_job_gate,
            root=str(home / "data"),
            max_container_restart_period=args.max_container_restart_period,
            serialize_image_pulls=args.serialize_image_pulls,
            max_parallel_image_pulls=args.max_parallel_image_pulls,
            permissive_images=args.permissive_images,
            kubernetes_version=args.kubernetes_version,
            feature_gates=args.feature_gates,
            authorization_mode=args.authorization_mode,
            tls=args.tls,
        )
    )
    cluster.start()
    kubeconfig = cluster.write_kubeconfig(home / "kubeconfig")
    ca = None
    if cluster.certs is not None:
        ca = home / "ca.crt"
        ca.write_bytes(cluster.certs.ca)
    _state_file(home).write_text(
        json.dumps(
            {
                "pid": os.getpid(),
                "url": cluster.url,
                "kubeconfig": str(kubeconfig),
                "profile": args.profile,
                "nodes": args.nodes,
                "ca": str(ca) if ca else None,
            }
        )
    )
    print(
        f"kruise-local serving {cluster.url} (profile {args.profile}, {args.nodes} node(s)); "
        f"KUBECONFIG={kubeconfig}",
        flush=True,
    )
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    done.wait()
    cluster.stop()
    _state_file(home).unlink(missing_ok=True)
    return 0


def up(args: argparse.Namespace) -> int:
    """Start the cluster in the background and print the kubeconfig path."""
    home = Path(args.home)
    state = _read_state(home)
    if state and _alive(state):
        print(f"already running at {state['url']}; KUBECONFIG={state['kubeconfig']}")
        return 0
    home.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "kruise_local",
        "--home",
        str(home),
        "serve",
        "--profile",
        args.profile,
        "--nodes",
        str(args.nodes),
        "--port",
        str(args.port),
        "--sandbox",
        args.sandbox,
        "--kubernetes-version",
        args.kubernetes_version,
        "--feature-gates",
        args.feature_gates,
        "--authorization-mode",
        args.authorization_mode,
    ]
    if args.tls:
        cmd.append("--tls")
    if args.max_container_restart_period is not None:
        cmd += ["--max-container-restart-period", str(args.max_container_restart_period)]
    if args.serialize_image_pulls is not None:
        cmd += ["--serialize-image-pulls", str(args.serialize_image_pulls).lower()]
    if args.max_parallel_image_pulls is not None:
        cmd += ["--max-parallel-image-pulls", str(args.max_parallel_image_pulls)]
    if args.catalogue:
        cmd += ["--catalogue", args.catalogue]
    if args.no_image_pull_job_gate:
        cmd.append("--no-image-pull-job-gate")
    if args.permissive_images:
        cmd.append("--permissive-images")
    _state_file(home).unlink(missing_ok=True)
    log = open(home / "server.log", "ab")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        state = _read_state(home)
        if state and _alive(state):
            print(f"kruise-local up at {state['url']}\nexport KUBECONFIG={state['kubeconfig']}")
            return 0
        if proc.poll() is not None:
            print(f"kruise-local failed to start; see {home / 'server.log'}", file=sys.stderr)
            return 1
        time.sleep(0.1)
    print(f"kruise-local did not answer within 60 s; see {home / 'server.log'}", file=sys.stderr)
    return 1


def down(args: argparse.Namespace) -> int:
    """Stop a cluster started with `up`."""
    home = Path(args.home)
    state = _read_state(home)
    if not state:
        print("kruise-local is not running")
        return 0
    try:
        os.kill(state["pid"], signal.SIGTERM)
    except ProcessLookupError:
        pass
    for _ in range(100):
        if not _state_file(home).exists():
            break
        time.sleep(0.1)
    _state_file(home).unlink(missing_ok=True)
    print("kruise-local stopped")
    return 0


def status(args: argparse.Namespace) -> int:
    """Say whether the cluster runs, where, and with what."""
    state = _read_state(Path(args.home))
    if not state or not _alive(state):
        print("kruise-local is not running")
        return 1
    print(
        f"kruise-local running at {state['url']} (pid {state['pid']}, profile {state['profile']}, "
        f"{state['nodes']} node(s)); KUBECONFIG={state['kubeconfig']}"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kruise-local", description=__doc__)
    parser.add_argument("--home", default=str(DEFAULT_STATE), help="state folder (default ./.kruise-local)")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, fn in (("up", up), ("serve", serve)):
        p = sub.add_parser(name, help=fn.__doc__)
        _add_cluster_args(p)
        p.set_defaults(fn=fn)
    for name, fn in (("down", down), ("status", status)):
        sub.add_parser(name, help=fn.__doc__).set_defaults(fn=fn)
    args = parser.parse_args(argv)
    if args.fn in (up, serve):
        _check_cluster_args(parser, args)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
