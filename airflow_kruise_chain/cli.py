"""`kruise-chain`: the provider's command line. `kruise-chain check` says whether chains can run in a
namespace through a connection (see `preflight.py`), each missing item with its fix; exit status 1 when one
fails."""

from __future__ import annotations

import argparse
import sys


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
        help="an Airflow connection (kubernetes or kruise_chain type; read as Airflow reads it, "
        "e.g. from AIRFLOW_CONN_<ID>)",
    )
    where.add_argument("--kubeconfig", help="a kubeconfig file instead of a connection")
    where.add_argument("--in-cluster", action="store_true", help="the pod's service account")
    check.add_argument("--context", help="the kubeconfig context")
    check.add_argument("--runner-image", help="the stage runner image (default: [kruise_chain] runner_image)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from airflow_kruise_chain.hooks.kruise import KruiseHook
    from airflow_kruise_chain.preflight import FAIL, UNKNOWN, check

    if args.kubeconfig or args.in_cluster:
        hook = KruiseHook(
            conn_id=None,
            config_file=args.kubeconfig,
            in_cluster=args.in_cluster or None,
            cluster_context=args.context,
        )
    else:
        hook = KruiseHook(conn_id=args.conn_id or "kubernetes_default", cluster_context=args.context)
    findings = check(hook, args.namespace, args.runner_image)
    for finding in findings:
        print(finding.line())
    failed = sum(f.status == FAIL for f in findings)
    unknown = sum(f.status == UNKNOWN for f in findings)
    if failed:
        print(f"{failed} of {len(findings)} checks failed: chains will fail here until fixed")
    elif unknown:
        print(f"no check failed, {unknown} could not be made")
    else:
        print("chains can run here")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
