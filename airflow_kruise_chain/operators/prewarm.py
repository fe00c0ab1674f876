"""The prewarm of a chain: one OpenKruise ImagePullJob per stage image on the chain pod's node."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import Context

from airflow_kruise_chain.core.errors import ChainConfigError, PodLostError
from airflow_kruise_chain.operators.base import ChainBaseOperator, check_image, check_positive

if TYPE_CHECKING:
    from airflow_kruise_chain.core.kruise import Outcome


class ChainPrewarmOperator(ChainBaseOperator):
    """Prewarm the chain's images on the chain pod's node with one OpenKruise ImagePullJob per image.

    Success follows OpenKruise's rule: a job is done when `status.completionTime` is set, and succeeded only
    if `failed == 0 and succeeded == desired > 0`. When the ImagePullJobGate feature gate is off, fails
    with how to enable it, or (`on_unavailable="skip"`) logs a warning and lets the stages pull on demand.
    Each try has its own job names (from the try number): a replay of a try adopts its own jobs, a retry
    creates new ones (an earlier try's failed job would fail it at once); OpenKruise deletes finished jobs
    after their TTL. `images` is templated: each is checked once rendered (`KruiseChain` gives it the stage
    images known before their stages run: plain, or templated on the DAG run alone).
    """

    template_fields: Sequence[str] = (*ChainBaseOperator.template_fields, "images")
    ui_color = "#e8ffd4"

    def __init__(
        self,
        *,
        images: Sequence[str] = (),
        on_unavailable: str = "fail",
        pull_timeout: int = 600,
        backoff_limit: int = 3,
        **kwargs: Any,
    ) -> None:
        if on_unavailable not in ("fail", "skip"):
            raise ChainConfigError("on_unavailable", f"must be 'fail' or 'skip', not {on_unavailable!r}")
        check_positive("pull_timeout", pull_timeout)
        super().__init__(**kwargs)
        self.images = images
        self.on_unavailable = on_unavailable
        self.pull_timeout = pull_timeout
        self.backoff_limit = backoff_limit

    def execute(self, context: Context) -> dict[str, str]:
        from airflow_kruise_chain.core.kruise import (
            IMAGE_PULL_JOB_PLURAL,
            build_image_pull_job,
            image_pull_job_name,
        )
        from airflow_kruise_chain.core.manifest import chain_labels
        from airflow_kruise_chain.hooks.kruise import KruiseApiError, PrewarmUnavailableError

        images = self.rendered_images()
        name = self.pod_name(context)
        pod = self.hook.read_pod(name, self.namespace)
        if pod is None or not pod.node_name:
            raise PodLostError(
                f"chain pod {self.namespace}/{name} is missing or unscheduled: prewarm runs after "
                "the chain's setup task"
            )
        node = pod.node_name
        labels = chain_labels(context["dag"].dag_id, context["run_id"], self.chain_id)
        jobs: dict[str, str] = {}
        for image in images:
            job = build_image_pull_job(
                image_pull_job_name(name, image, context["ti"].try_number),
                self.namespace,
                image,
                node_name=node,
                timeout_seconds=self.pull_timeout,
                backoff_limit=self.backoff_limit,
                labels=labels,
            )
            try:
                self.hook.create_kruise(IMAGE_PULL_JOB_PLURAL, job, self.namespace)
            except PrewarmUnavailableError as e:
                if self.on_unavailable == "skip":
                    self.log.warning("prewarm skipped: %s", e)
                    return {}
                raise
            jobs[image] = job["metadata"]["name"]
            self.log.info(
                "::kruise-chain:: prewarm %s on node %s (ImagePullJob %s)", image, node, jobs[image]
            )
        deadline = time.monotonic() + self.pull_timeout * (self.backoff_limit + 1) + 30
        results: dict[str, str] = {}
        for image, job_name in jobs.items():
            outcome = self.wait_pull_job(job_name, image, deadline)
            if outcome == "failed":
                raise KruiseApiError(f"prewarm failed: {outcome.message}")
            self.log.info("::kruise-chain:: prewarmed %s: %s", image, outcome.message)
            results[image] = job_name
        return results

    def rendered_images(self) -> list[str]:
        """The images as rendered, once each, checked (ChainConfigError naming `images[i]`)."""
        for i, image in enumerate(self.images):
            check_image(f"images[{i}]", image)
        return list(dict.fromkeys(self.images))

    def wait_pull_job(self, job_name: str, image: str, deadline: float) -> Outcome:
        """The outcome of ImagePullJob `job_name` once it completes (StageTimeoutError at `deadline`)."""
        from airflow_kruise_chain.core.errors import StageTimeoutError
        from airflow_kruise_chain.core.kruise import IMAGE_PULL_JOB_PLURAL, image_pull_job_outcome
        from airflow_kruise_chain.core.watch import watch_until

        def watch(seconds: int, version: str | None) -> Iterator[dict[str, Any]]:
            return self.hook.watch_kruise(IMAGE_PULL_JOB_PLURAL, job_name, self.namespace, seconds, version)

        done, job = watch_until(
            watch,
            lambda job: job is not None and image_pull_job_outcome(job) != "running",
            deadline,
            relist=lambda: self.hook.get_kruise(IMAGE_PULL_JOB_PLURAL, job_name, self.namespace),
        )
        if not done or job is None:
            raise StageTimeoutError(
                f"image pull timeout: ImagePullJob {job_name} for {image} did not complete"
            )
        return image_pull_job_outcome(job)
