# The stage runner image of airflow-kruise-chain: busybox's static musl build, this provider's runner script
# and its installer, which the chain pod's init container runs by its path (it checks both files' sha256
# against the provider's, then copies the runner and the busybox into the pod). Both are `#!` scripts: mode
# 0555, readable (their shell reads them) and executable (they are exec'd). Build it from the installed package's
# core/ folder and tag it with the provider's version, e.g.:
#   docker build -f runner.Dockerfile -t ghcr.io/airflow-kruise-chain/runner:0.1.0 \
#     "$(python -c 'import airflow_kruise_chain.core as c, os; print(os.path.dirname(c.__file__))')"
FROM busybox:1.37.0-musl
COPY --chmod=0555 runner.sh /kruise-chain-runner/runner
COPY --chmod=0555 runner-install.sh /kruise-chain-runner/install
