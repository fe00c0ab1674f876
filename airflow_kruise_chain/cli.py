"""`kruise-chain`: the provider's command line. `kruise-chain check` says whether chains can run in a
namespace through a connection (see `preflight/`), each missing item with its fix. Exit status 0: chains can
run there; 1: a check failed or could not tell; 2: the command line is wrong. `--output json` prints the
findings as one JSON document (docs/connection.md). Standard output holds the report alone: what the
check's libraries log goes to standard error. `kruise-chain runner-configmap` prints the stage runner's
ConfigMap (`core/runnerinstall.py`) for an admin to apply where the chain's identity may not create it."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Iterator

from airflow_kruise_chain.preflight.base import FEATURES, Report

PROCESS_CONTEXT = "_AIRFLOW_PROCESS_CONTEXT"
"""Airflow's variable saying which process reads connections: "server" reads the metadata database"""


def _features(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    for name in names:
        if name not in FEATURES:
            raise argparse.ArgumentTypeError(
                f"{name!r} is not an optional feature; choose from {', '.join(FEATURES)}"
            )
    return names


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kruise-chain", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="check a cluster and namespace before running chains there")
    check.add_argument(
        "-n", "--namespace", default="default", help="the chains' namespace (default: default)"
    )
    where = check.add_mutually_exclusive_group()
    where.add_argument(
        "--conn-id",
        help="an Airflow connection (kubernetes or kruise_chain type; read as Airflow's command line reads "
        "it: AIRFLOW_CONN_<ID>, a secrets backend, or the metadata database)",
    )
    where.add_argument("--kubeconfig", help="a kubeconfig file instead of a connection")
    where.add_argument("--in-cluster", action="store_true", help="the pod's service account")
    check.add_argument("--context", help="the kubeconfig context")
    check.add_argument("--runner-image", help="the stage runner image (default: [kruise_chain] runner_image)")
    check.add_argument(
        "--without",
        type=_features,
        action="extend",
        default=[],
        metavar="FEATURE[,FEATURE]",
        help=f"optional features the chains here go without, not checked: {', '.join(FEATURES)}",
    )
    check.add_argument(
        "--no-probe",
        action="store_true",
        help="do not start the probe chain pod (whether a node pulls the runner and starts a chain pod is "
        "then not checked)",
    )
    check.add_argument(
        "--probe-timeout", type=float, default=120.0, help="seconds the probe chain pod may take to start"
    )
    check.add_argument(
        "-o", "--output", choices=("text", "json"), default="text", help="text (default) or json"
    )
    manifest = sub.add_parser(
        "runner-configmap",
        help="print the stage runner's ConfigMap for an admin to apply (kubectl apply -f -), for a chain "
        "identity that may not create ConfigMaps",
    )
    manifest.add_argument("-n", "--namespace", default="default", help="the chains' namespace")
    return parser


@contextlib.contextmanager
def _as_airflow_server() -> Iterator[None]:
    """Airflow's hooks read connections as its servers and command line do (environment, secrets backends,
    then the metadata database) while this lasts; outside a task or a server they read no database. The
    process's previous context comes back afterwards (`main` runs in-process in tests and other tools)."""
    before = os.environ.get(PROCESS_CONTEXT)
    os.environ[PROCESS_CONTEXT] = "server"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(PROCESS_CONTEXT, None)
        else:
            os.environ[PROCESS_CONTEXT] = before


@contextlib.contextmanager
def _logs_to_stderr() -> Iterator[None]:
    """What the check's libraries print goes to standard error while it lasts, so that standard output holds
    the report alone (`--output json` is one JSON document): Airflow's logs, which its logging setup sends to
    standard output (its secrets masker warns of a connection's short extra as the connection is read; a
    hook's log lines), and anything else written to file descriptor 1."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
        os.dup2(2, 1)
    except OSError:  # no standard output or error to speak of
        saved = None
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        for stream in (sys.stdout, sys.__stdout__):
            with contextlib.suppress(Exception):
                stream.flush()  # what was written went to standard error: flushed there, before fd 1 is back
        if saved is not None:
            os.dup2(saved, 1)
            os.close(saved)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "runner-configmap":
        from airflow_kruise_chain.core.runnerinstall import runner_configmap

        print(json.dumps(runner_configmap(args.namespace), indent=2))
        return 0
    with _logs_to_stderr():  # from the first import of Airflow on, which may set its logging up
        report = _check(args)
    print(json.dumps(report.to_json(), indent=2) if args.output == "json" else report.text())
    return report.exit_code


def _check(args: argparse.Namespace) -> Report:
    from airflow_kruise_chain.hooks.kruise import KruiseHook
    from airflow_kruise_chain.preflight import check

    if args.kubeconfig or args.in_cluster:
        hook = KruiseHook(
            conn_id=None,
            config_file=args.kubeconfig,
            in_cluster=args.in_cluster or None,
            cluster_context=args.context,
        )
        scope: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
    else:  # an Airflow connection, read as `airflow connections get` reads it: the metadata database too
        hook = KruiseHook(conn_id=args.conn_id or "kubernetes_default", cluster_context=args.context)
        scope = _as_airflow_server()
    with scope:  # the hook reads its connection on its first request, the check's 'connection' finding
        return check(
            hook,
            args.namespace,
            args.runner_image,
            without=args.without,
            probe=not args.no_probe,
            probe_timeout=args.probe_timeout,
        )


if __name__ == "__main__":
    sys.exit(main())
