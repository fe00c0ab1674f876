"""Mapped stages: ``chain.stage.partial(NAME, ...).expand(...)`` / ``.expand_kwargs(...)`` (and a TaskFlow
stage's ``.expand``): each map index is a stage of the chain's pod.

Map index i runs as the pod's stage ``NAME-i`` (`core.spec.index_stage_name`): its own record, generations,
result, XCom, retries and clears. The chain's pod has two slots, so the mapped task gets
``max_active_tis_per_dagrun=2`` (at most 2; 1 runs the indexes one at a time): the scheduler starts at most
that many indexes of a run at once and keeps the others scheduled, holding no worker, until an index ends.
An index that still finds both slots busy (another stage of the chain runs beside the mapped one) waits for
one on its worker, as any stage does. ``max_active_tis_per_dag`` (every run's indexes together, each run
having its own pod) is Airflow's as for any task. The pod records every index: a mapped stage has at most
`max_map_length` indexes (`DEFAULT_MAX_MAP_LENGTH`; the pod's annotations are checked at parse time for that
many records, and an index past it fails before it runs).

What may be expanded: `image`, `cmds`, `arguments`, `env` (plain values; Secret and ConfigMap references in
the partial). Their literal values are checked at parse time, each map index's rendered values when it runs;
the partial's image, and each literal expanded image, are prewarmed; an image expanded from an XCom is known
when its index runs (its slot is patched then).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol

from airflow_kruise_chain.core.constants import SLOTS
from airflow_kruise_chain.core.errors import ChainConfigError
from airflow_kruise_chain.core.spec import StageSpec
from airflow_kruise_chain.kpo import refuse_xcom_file
from airflow_kruise_chain.operators.chain import KruiseChainOperator
from airflow_kruise_chain.templating import STAND_IN_IMAGE, check_renderable_values, unwrap_literals

EXPANDABLE = ("image", "cmds", "arguments", "env")
DEFAULT_MAX_MAP_LENGTH = 128
"""Map indexes a mapped stage may have by default (about 300 bytes of the pod's annotations each)."""


class MappingChain(Protocol):
    """What a mapped stage needs of its `KruiseChain`."""

    def where(self, name: str) -> str: ...

    def stage_kwargs(self, where: str, *, image: str | None, **kwargs: Any) -> dict[str, Any]: ...

    def add_mapped_stage(self, task: Any, where: str, spec: StageSpec, samples: list[StageSpec]) -> None: ...


def concurrency(where: str, kwargs: dict[str, Any]) -> None:
    """Set a mapped stage's `max_active_tis_per_dagrun` to the pod's slots, or check the author's."""
    limit = kwargs.setdefault("max_active_tis_per_dagrun", len(SLOTS))
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= len(SLOTS):
        raise ChainConfigError(
            f"{where}.max_active_tis_per_dagrun",
            f"must be 1 or {len(SLOTS)}, not {limit!r}: the chain's pod runs at most {len(SLOTS)} stages at "
            "once, so more map indexes would hold workers waiting for a slot",
        )


def map_length(where: str, kwargs: dict[str, Any]) -> int:
    """The mapped stage's `max_map_length` (popped from `kwargs`), checked."""
    value = kwargs.pop("max_map_length", DEFAULT_MAX_MAP_LENGTH)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ChainConfigError(f"{where}.max_map_length", f"must be a positive int, not {value!r}")
    return value


class MappedStage:
    """``chain.stage.partial(name, **kwargs)`` (or ``partial(task_id=..., name=...)``, see
    `KruiseChain.naming`): a stage whose `expand` / `expand_kwargs` make one stage of
    the chain's pod per map index (see the module's docstring)."""

    def __init__(self, chain: MappingChain, task_id: str, name: str, kwargs: dict[str, Any]) -> None:
        self.chain = chain
        self.task_id = task_id
        self.name = name
        self.kwargs = kwargs

    def expand(self, **mapped: Any) -> Any:
        """One stage per element of the `mapped` lists (or XComArgs); Airflow's `.expand`."""
        where = self.chain.where(self.name)
        self._check_expandable(where, mapped)
        samples = [
            {field: value}
            for field, values in mapped.items()
            if isinstance(values, (list, tuple))
            for value in values
        ]
        return self._make(where, set(mapped), samples, lambda partial: partial.expand(**mapped))

    def expand_kwargs(self, kwargs: Any, *, strict: bool = True) -> Any:
        """One stage per dict of `kwargs` (a list of dicts, or an XComArg); Airflow's `.expand_kwargs`."""
        where = self.chain.where(self.name)
        samples = (
            [dict(item) for item in kwargs if isinstance(item, Mapping)] if isinstance(kwargs, list) else []
        )
        for sample in samples:
            self._check_expandable(where, sample)
        fields = set().union(*samples) if samples else set(EXPANDABLE)
        return self._make(
            where, fields, samples, lambda partial: partial.expand_kwargs(kwargs, strict=strict)
        )

    def _check_expandable(self, where: str, mapped: Mapping[str, Any]) -> None:
        for field in mapped:
            if field == "env_vars":
                raise ChainConfigError(
                    f"{where}.env_vars",
                    "cannot be expanded: expand(env=[{...}, ...]), a dict per map index "
                    "(KubernetesPodOperator's env_vars as a dict)",
                )
            if field not in EXPANDABLE:
                raise ChainConfigError(
                    f"{where}.{field}",
                    f"cannot be expanded: a mapped stage expands {', '.join(EXPANDABLE)}; give {field} in "
                    "partial(...)",
                )
            if field in self.kwargs or (field == "env" and "env_vars" in self.kwargs):
                raise ChainConfigError(f"{where}.{field}", "is given both in partial(...) and expanded")

    def _make(self, where: str, expanded: set[str], samples: list[dict[str, Any]], expand: Any) -> Any:
        kwargs = dict(self.kwargs)
        refuse_xcom_file(where, kwargs)
        limit = map_length(where, kwargs)
        concurrency(where, kwargs)
        if "cmds" not in kwargs and "cmds" not in expanded:
            raise ChainConfigError(f"{where}.cmds", "is required: in partial(...) or expanded")
        image = kwargs.pop("image", None)
        if image is None and "image" not in expanded:
            raise ChainConfigError(f"{where}.image", "is required: in partial(...) or expanded")
        stage = self.chain.stage_kwargs(where, image=image or STAND_IN_IMAGE, **kwargs)
        mounts = stage.pop("volume_mounts")
        for field in expanded:
            stage.pop(field, None)
        stage["max_map_length"] = limit
        task = expand(KruiseChainOperator.partial(task_id=self.task_id, stage_name=self.name, **stage))
        spec = StageSpec(
            name=self.name,
            image=unwrap_literals(stage.get("image", STAND_IN_IMAGE)),
            cmds=unwrap_literals(stage.get("cmds", ["expanded"])),
            arguments=unwrap_literals(stage.get("arguments") or []),
            env=unwrap_literals(stage.get("env") or {}),
            resources=stage.get("container_resources") or {},
            image_pull_policy=stage.get("image_pull_policy"),
            env_sources=stage.get("env_sources") or {},
            env_from=stage.get("env_from") or [],
            volume_mounts=mounts,
            map_length=limit,
        )
        env = task.get_template_env()
        check_renderable_values(env, {k: v for k, v in stage.items() if k in EXPANDABLE}, f"{where}.")
        for sample in samples:
            check_renderable_values(env, sample, f"{where}.")
        indexes = [replace(spec, **{k: unwrap_literals(v) for k, v in s.items()}) for s in samples] or [spec]
        self.chain.add_mapped_stage(task, where, spec, indexes)
        return task


def literal_images(samples: Sequence[StageSpec]) -> list[str]:
    """The images of a mapped stage's literal map indexes (what the prewarm can pull)."""
    return list(dict.fromkeys(s.image for s in samples if s.image != STAND_IN_IMAGE))
