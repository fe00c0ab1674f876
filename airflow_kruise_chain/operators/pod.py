"""The chain pod's lifecycle: the setup task creates it (sized, both slots parked), the teardown task
deletes it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from airflow.sdk import Context

from airflow_kruise_chain.config import runner_image
from airflow_kruise_chain.core.errors import ChainConfigError, ChainError
from airflow_kruise_chain.core.manifest import check_annotations_size
from airflow_kruise_chain.core.resources import ChainSizing, plan_sizing
from airflow_kruise_chain.core.spec import ChainSpec
from airflow_kruise_chain.links import ChainPodLink
from airflow_kruise_chain.operators.base import ChainBaseOperator, check_image, check_positive
from airflow_kruise_chain.templating import STAND_IN_IMAGE, templated, validatable

if TYPE_CHECKING:
    from airflow_kruise_chain.core.podview import ChainPod


class ChainSetupOperator(ChainBaseOperator):
    """Create the chain's persistent pod and wait until both slots are parked (its init container installs
    the stage runner first).

    Idempotent: a retry, or a second try after a worker crash, finds the pod it created by name.
    Returns `{"pod": name, "namespace": ns, "node": node}` (XCom).

    `chain` is the chain as `ChainSpec.to_dict()` gives it (its `namespace` the default of this task's).
    `stage_images` (templated, stage name -> image) are the stages' templated images that render the same
    in this task's context as in their stage's (`templating.run_level`: params, Variables, dates): rendered
    here, they give the slots their first images and the pull policy. A slot whose first stage's image is
    only known when that stage renders it starts on the runner image (the stage's swap then patches it).
    """

    template_fields: Sequence[str] = (*ChainBaseOperator.template_fields, "stage_images")
    ui_color = "#d4e8ff"
    operator_extra_links = (ChainPodLink(),)

    def __init__(
        self,
        *,
        chain: dict[str, Any],
        namespace: str | None = None,
        stage_images: dict[str, str] | None = None,
        startup_timeout: float = 300,
        **kwargs: Any,
    ) -> None:
        if not isinstance(chain, dict):
            raise ChainConfigError("chain", "must be a dict with name, namespace and stages")
        for key in ("name", "namespace"):
            if key not in chain:
                raise ChainConfigError(key, "is required")
        check_positive("startup_timeout", startup_timeout)
        namespace = namespace or chain["namespace"]
        super().__init__(chain_name=chain["name"], namespace=namespace, **kwargs)
        self.chain = chain
        self.stage_images = stage_images or {}
        self.startup_timeout = startup_timeout
        if self.has_dag():
            _check_one_pod_per_chain(self)
        if chain.get("stages"):  # KruiseChain fills the stages in when its block ends (and validates them)
            validatable(ChainSpec.from_dict(chain)).validate()

    def chain_spec(self) -> ChainSpec:
        """The chain as this task runs it, validated: its namespace and stage images as rendered here (a
        stage image still templated is known when its stage renders it: `STAND_IN_IMAGE` until then)."""
        spec = ChainSpec.from_dict({**self.chain, "namespace": self.namespace})
        if spec.runner_image is None:
            spec = replace(spec, runner_image=runner_image())
        stages = []
        for i, stage in enumerate(spec.stages):
            image = self.stage_images.get(stage.name, stage.image)
            if stage.name in self.stage_images:
                check_image(f"stages[{i}].image (rendered in the setup task's context)", image)
            stages.append(replace(stage, image=STAND_IN_IMAGE if templated(image) else image))
        spec = replace(spec, stages=stages)
        spec.validate()
        check_annotations_size(spec)
        return spec

    def execute(self, context: Context) -> dict[str, str]:
        from airflow_kruise_chain.core.manifest import build_chain_pod, chain_labels, pod_name_for
        from airflow_kruise_chain.core.podidentity import prepare_pod, spec_hash, stamp
        from airflow_kruise_chain.core.runnerinstall import configmap_name
        from airflow_kruise_chain.core.sizing import size_pod

        # everything is checked before the first write: an invalid chain creates nothing in the cluster
        spec = self.chain_spec()
        dag_id, run_id = context["dag"].dag_id, context["run_id"]
        name = pod_name_for(spec.name, dag_id, run_id, self.chain_path)
        labels = chain_labels(dag_id, run_id, self.chain_id)
        first_images = tuple(
            spec.runner_image if image == STAND_IN_IMAGE else image for image in spec.first_images
        )
        if spec.runner_image in first_images:
            self.log.info(
                "a first stage's image is only known when its stage renders it: its slot starts on the "
                "runner image %s",
                spec.runner_image,
            )
        pod = build_chain_pod(
            spec,
            pod_name=name,
            dag_id=dag_id,
            run_id=run_id,
            first_images=first_images,
            chain_path=self.chain_path,
        )
        pod = size_pod(pod, self.sizing(spec))
        digest = spec_hash(pod)
        if self.hook.ensure_runner_configmap(spec.namespace):  # what the init container installs
            self.log.info("made the stage runner's ConfigMap %s/%s", spec.namespace, configmap_name())
        # never another run's pod; one of this run is reused only if healthy and built from this chain
        prepare_pod(
            self.hook,
            name,
            spec.namespace,
            labels,
            digest,
            timeout=self.startup_timeout,
            log=self.log.info,
        )
        try:
            created = self.hook.create_pod(stamp(pod, digest), spec.namespace)
            self.log.info("chain pod %s/%s (uid %s)", spec.namespace, name, created["metadata"].get("uid"))
            self.pod_url(context)
            pod = self.wait_parked(spec, name)
        except BaseException:
            self.remove(name, spec.namespace)
            raise
        node = pod.node_name
        self.log.info("chain pod %s is running on node %s with both slots parked", name, node)
        return {"pod": name, "namespace": spec.namespace, "node": node}

    def remove(self, name: str, namespace: str) -> None:
        """A failed setup leaves nothing behind: delete this run's chain pod."""
        self.log.warning(
            "setup failed: deleting chain pod %s/%s so that nothing is left behind",
            namespace,
            name,
        )
        try:
            self.hook.delete_pod(name, namespace)
        except Exception:  # the setup's own error is the one to report; teardown deletes them again
            self.log.exception("could not delete the chain pod %s/%s after the failed setup", namespace, name)

    def sizing(self, spec: ChainSpec) -> ChainSizing | None:
        """Per-stage in-place sizing, or None for the static sizing (said once here, in the setup log)."""
        if spec.sizing == "static":
            self.log.info(
                "sizing: static (sizing='static'): both slots reserve the largest stage's resources"
            )
            return None
        if not self.hook.serves_resize():
            if spec.sizing == "in-place":
                raise ChainError(
                    "sizing='in-place' but the cluster serves no pods/resize (Kubernetes < 1.33, or the "
                    "InPlacePodVerticalScaling feature gate off): use sizing='auto' or 'static'"
                )
            self.log.info(
                "sizing: static: the cluster serves no pods/resize (Kubernetes < 1.33, or the "
                "InPlacePodVerticalScaling feature gate off), so both slots reserve the largest stage's "
                "resources"
            )
            return None
        sizing = plan_sizing(spec.stages, spec.parked_resources)
        if sizing.qos == "BestEffort":
            self.log.info("sizing: no stage requests cpu or memory: nothing to size")
            return None
        self.log.info(
            "sizing: in-place: each swap resizes its slot for the stage and parks the idle one at %s "
            "(QoS %s)",
            sizing.parked,
            sizing.qos,
        )
        return sizing

    def wait_parked(self, spec: ChainSpec, name: str) -> ChainPod:
        """The chain pod once both slots are parked; PodStartError as soon as the cluster says why it cannot
        start (a missing Secret, ConfigMap or key, an image, no node: `core/startup.py`)."""
        from airflow_kruise_chain.config import scale_up_wait
        from airflow_kruise_chain.core.manifest import INIT_CONTAINER
        from airflow_kruise_chain.core.runnerinstall import install_failure
        from airflow_kruise_chain.core.sources import readers
        from airflow_kruise_chain.core.startup import StartupWatch, wait_started

        watch = StartupWatch(spec.namespace, readers(spec.stages), scale_up_wait())
        return wait_started(
            self.hook,
            name,
            spec.namespace,
            self.startup_timeout,
            watch,
            log=self.log.info,
            install_failure=lambda pod: install_failure(pod.raw, INIT_CONTAINER),
        )


FAILED_STATES = ("failed", "upstream_failed")


class ChainTeardownOperator(ChainBaseOperator):
    """Delete the chain pod (Airflow teardown: runs even when a stage failed), then give the chain's
    verdict: fail when a task upstream of it in this DAG run (the chain's setup, stages, sensors) ended
    failed or upstream_failed.

    `KruiseChain` makes it a teardown with `on_failure_fail_dagrun=True`: Airflow then decides the DAG run's
    state from the teardown instead of the chain's last stages, so a run fails whenever any of its stages
    failed, also when a cleared middle stage failed while a later stage kept its success from an earlier
    try (a run's state comes from its leaves only). `keep_pod`: True keeps the pod, "on_failure" keeps it
    when the chain did not succeed (KubernetesPodOperator's `on_finish_action="delete_succeeded_pod"`).
    """

    ui_color = "#ffe4d4"

    delete_margin: float = 15.0
    """seconds allowed beyond the pod's grace period for it to disappear"""

    def __init__(self, *, keep_pod: bool | str = False, **kwargs: Any) -> None:
        if keep_pod not in (True, False, "on_failure"):
            raise ChainConfigError("keep_pod", f"must be True, False or 'on_failure', not {keep_pod!r}")
        super().__init__(**kwargs)
        self.keep_pod = keep_pod

    def execute(self, context: Context) -> None:
        name = self.pod_name(context)
        failed = self.failed_upstream(context)
        kept = self.keep_pod is True or (self.keep_pod == "on_failure" and bool(failed))
        if kept:
            self.log.info(
                "keep_pod=%r: leaving chain pod %s/%s in place", self.keep_pod, self.namespace, name
            )
            self.retire_run_specs(name)
            pod = "kept"
        else:
            pod = "deleted" if self.delete(name) else "not there to delete (never created, or already gone)"
        self.verdict(failed, pod)

    def retire_run_specs(self, name: str) -> None:
        """Delete the kept pod's run specs (`core.swap.retire_run_specs`: every stage task has ended), so
        that no restart of a slot runs anything and no stage's command or env stays in the pod. Cleanup
        only: a failure (the pod gone, or changed since it was read) is logged, never raised."""
        from airflow_kruise_chain.core.swap import retire_run_specs
        from airflow_kruise_chain.hooks.retry import KruiseApiError

        try:
            pod = self.hook.read_pod(name, self.namespace)
            patch = retire_run_specs(pod) if pod is not None else None
            if patch is not None:
                self.hook.patch_pod(name, self.namespace, patch)
                self.log.info("retired the run specs of chain pod %s/%s", self.namespace, name)
        except (ChainError, KruiseApiError) as err:
            self.log.warning(
                "could not retire the run specs of chain pod %s/%s: %s", self.namespace, name, err
            )

    def failed_upstream(self, context: Context) -> dict[str, str]:
        """task id -> state of each task upstream of this teardown that failed in this DAG run."""
        upstream = sorted(self.get_flat_relative_ids(upstream=True)) if self.has_dag() else []
        if not upstream:
            return {}
        states = context["ti"].get_task_states(
            dag_id=context["dag"].dag_id, task_ids=upstream, run_ids=[context["run_id"]]
        )
        return {
            task: str(state)
            for task, state in sorted((states.get(context["run_id"]) or {}).items())
            if str(state) in FAILED_STATES
        }

    def verdict(self, failed: dict[str, str], pod: str) -> None:
        """Fail (no retry) when a task upstream of this teardown failed in this DAG run (`failed`), saying
        what became of the chain pod (`pod`: kept, deleted, not there)."""
        from airflow.sdk.exceptions import AirflowFailException

        if failed:
            listed = ", ".join(f"{task} ({state})" for task, state in failed.items())
            raise AirflowFailException(
                f"chain {self.chain_id!r} did not succeed in this DAG run: {listed}. The chain pod was "
                f"{pod}; this teardown fails so that the DAG run is "
                "marked failed (on_failure_fail_dagrun), also when a later stage kept its success from an "
                "earlier try"
            )

    def delete(self, name: str) -> bool:
        """Delete the chain pod and wait until it is gone (or the grace period and a margin have passed);
        False when there was none to delete.

        A stage a stop was asked for (its task's `on_kill` waits only a few seconds) is left the grace period
        and the margin to record its end first (`PodSession.settle_stops`: its runner's result line): the
        deletion would otherwise end it as ``terminated``, not ``stopped``."""
        from airflow_kruise_chain.core.podsession import PodSession
        from airflow_kruise_chain.core.watch import wait_pod_gone

        pod = self.hook.read_pod(name, self.namespace)
        if pod is not None:
            session = PodSession(self.hook, name, self.namespace, log=self.log.info)
            session.settle_stops(pod.grace_period + self.delete_margin)
        found = self.hook.delete_pod(name, self.namespace)
        if not found:
            self.log.info("chain pod %s/%s was already gone", self.namespace, name)
            return False
        # wait until the pod is really gone (its containers stopped), so the run ends with nothing left behind
        grace = pod.grace_period if pod is not None else 30.0
        version = pod.resource_version if pod is not None else None
        if wait_pod_gone(self.hook, name, self.namespace, version, grace + self.delete_margin):
            self.log.info("chain pod %s/%s deleted", self.namespace, name)
        else:
            self.log.warning(
                "chain pod %s/%s is still terminating %.0fs after its deletion; the cluster will remove it",
                self.namespace,
                name,
                grace + self.delete_margin,
            )
        return True


def _check_one_pod_per_chain(setup: ChainSetupOperator) -> None:
    """Refuse a second setup task of the same chain (name and task-group path) in a DAG: both would create,
    and their stages would share, one pod."""
    for task in setup.dag.tasks:
        if isinstance(task, ChainSetupOperator) and task is not setup and task.chain_id == setup.chain_id:
            raise ChainConfigError(
                "name",
                f"chain {setup.chain_id!r} already has a setup task ({task.task_id}) in DAG "
                f"{setup.dag.dag_id!r}: two chains of one name share one pod unless they are in different "
                "task groups; rename one",
            )
