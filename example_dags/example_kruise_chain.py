"""Example: a four-stage chain in one persistent pod, passing data through the scratch volume.

generate (1,000 CSV records) -> transform (clean and enrich) -> aggregate (per region) -> report.
Every stage is a different public image (busybox, alpine, debian, python); `prewarm` pulls them onto the
chain pod's node before the first swap. Runs unchanged on a real cluster with OpenKruise or on the embedded
local cluster, whose shipped image catalogue models them (`kruise-local up`, or
`python example_dags/run_example.py`).
"""

from __future__ import annotations

import os

import pendulum
from airflow.sdk import DAG

from airflow_kruise_chain.chain import KruiseChain

NAMESPACE = os.environ.get("KRUISE_CHAIN_NAMESPACE", "default")

GENERATE = r"""
i=1
: > "$CHAIN_SCRATCH/records.csv"
while [ "$i" -le "$RECORDS" ]; do
  echo "$i,region-$((i % 4)),$(( (i * 7919) % 1000 ))" >> "$CHAIN_SCRATCH/records.csv"
  i=$((i + 1))
done
echo "generated $RECORDS records into $CHAIN_SCRATCH/records.csv"
printf '{"records": %s, "file": "records.csv"}' "$RECORDS" > "$CHAIN_OUTPUT"
"""

TRANSFORM = r"""
test -s "$CHAIN_SCRATCH/records.csv" || { echo "no records.csv from the generate stage" >&2; exit 2; }
awk -F, -v min="$MIN_VALUE" '$3 >= min { printf "%s,%s,%d\n", $1, toupper($2), $3 * 2 }' \
  "$CHAIN_SCRATCH/records.csv" > "$CHAIN_SCRATCH/transformed.csv"
kept=$(wc -l < "$CHAIN_SCRATCH/transformed.csv")
echo "kept $kept of $(wc -l < "$CHAIN_SCRATCH/records.csv") records with value >= $MIN_VALUE (doubled)"
printf '{"kept": %s}' "$kept" > "$CHAIN_OUTPUT"
"""

AGGREGATE = r"""
awk -F, '{ n[$2]++; s[$2] += $3 } END { for (r in n) printf "%s,%d,%d\n", r, n[r], s[r] }' \
  "$CHAIN_SCRATCH/transformed.csv" | sort > "$CHAIN_SCRATCH/aggregates.csv"
echo "aggregated into $(wc -l < "$CHAIN_SCRATCH/aggregates.csv") regions:"
cat "$CHAIN_SCRATCH/aggregates.csv"
total=$(awk -F, '{ t += $3 } END { print t }' "$CHAIN_SCRATCH/aggregates.csv")
printf '{"regions": %s, "total": %s}' "$(wc -l < "$CHAIN_SCRATCH/aggregates.csv")" "$total" > "$CHAIN_OUTPUT"
"""

REPORT = r"""
echo "== report =="
awk -F, '{ printf "%-10s %5d records  sum %8d  mean %7.1f\n", $1, $2, $3, $3 / $2 }' \
  "$CHAIN_SCRATCH/aggregates.csv" | tee "$CHAIN_SCRATCH/report.txt"
best=$(sort -t, -k3 -n -r "$CHAIN_SCRATCH/aggregates.csv" | head -n 1 | cut -d, -f1)
echo "top region: $best"
printf '{"top_region": "%s", "lines": %s}' "$best" "$(wc -l < "$CHAIN_SCRATCH/report.txt")" > "$CHAIN_OUTPUT"
"""

with DAG(
    dag_id="example_kruise_chain",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["kruise-chain", "example"],
    doc_md=__doc__,
) as dag:
    with KruiseChain("etl", namespace=NAMESPACE, prewarm=True, scratch_size_limit="256Mi") as chain:
        generate = chain.stage(
            "generate",
            image="busybox:1.36",
            cmds=["/bin/sh", "-c", GENERATE],
            env={"RECORDS": "1000"},
            resources={"requests": {"memory": "16Mi"}, "limits": {"memory": "64Mi"}},
        )
        transform = chain.stage(
            "transform",
            image="alpine:3.20",
            cmds=["/bin/sh", "-c", TRANSFORM],
            env={"MIN_VALUE": "250"},
            resources={"requests": {"memory": "32Mi"}, "limits": {"memory": "128Mi"}},
        )
        aggregate = chain.stage(
            "aggregate",
            image="debian:bookworm-slim",
            cmds=["/bin/sh", "-c", AGGREGATE],
        )
        report = chain.stage("report", image="python:3.11-slim", cmds=["/bin/sh", "-c", REPORT])
        generate >> transform >> aggregate >> report
