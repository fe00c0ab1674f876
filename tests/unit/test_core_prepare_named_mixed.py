"""A rolling upgrade mixes workers of two versions on one chain pod: a worker from before the prepare's id
(26ffe98) prepares a slot with the image patch alone, leaving `<slot>.prepare-id` at the id of an earlier
prepare, which the slot's old container was created for. A go that named that id would be taken by that old
container, on the old image, before the kubelet restarts it. A prepare's id counts only when the slot's
prepare record carries it too (one patch writes both): a record without it (an older worker's) keeps the rule
of a pod made before (the go waits for the status to show the new container)."""

from __future__ import annotations

import json

from airflow_kruise_chain.core import StageState, plan_swap
from airflow_kruise_chain.core.status import slot_status
from tests.unit.test_core_prepare import prepared_pod
from tests.unit.test_core_swap import LOAD, NOW

PREPARED = "airflow-kruise-chain/slot-a.prepared"
RUN = "airflow-kruise-chain/slot-a.run"


def test_a_prepare_by_an_older_worker_does_not_name_the_stale_id() -> None:
    pod, _ = prepared_pod()
    pod.set_ready("slot-b")
    annotations = pod.pod["metadata"]["annotations"]
    record = json.loads(annotations[PREPARED])
    record.pop("id", None)  # the record an older worker writes; the annotation keeps an earlier prepare's id
    annotations[PREPARED] = json.dumps(record)
    assert pod.view.slot("slot-a").prepared is not None and pod.view.slot("slot-a").prepare_id == ""
    assert slot_status(pod.view, "slot-a").state is not StageState.FINISHED  # the old container still shown


def test_a_prepares_id_is_in_its_record_and_named_by_the_go() -> None:
    pod, prepare = prepared_pod()
    given = prepare.patch["metadata"]["annotations"]["airflow-kruise-chain/slot-a.prepare-id"]
    assert json.loads(prepare.patch["metadata"]["annotations"][PREPARED])["id"] == given
    pod.set_ready("slot-b")
    plan = plan_swap(pod.view, LOAD, try_number=1, now=NOW)
    assert f"\nkc_p={given}\n" in plan.patch["metadata"]["annotations"][RUN]
