"""What a model-guided tuner needs beyond the space: the workload and target (to lower candidates
and read their features) and the records DB (history of this task, transfer data from others)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..target import Target
from ..te import Workload


@dataclass
class TuneContext:
    """Passed by tune_workload to make_tuner; model-free tuners ignore it.

    ``db``: a TuningDatabase whose records of this (workload, target) are earlier measurements of
    this task and whose records of other workloads / targets seed the model (transfer learning,
    unless ``transfer`` is False). ``transfer_samples`` (cost_model Samples) replaces reading the DB
    for transfer, and ``feature_cache`` (config_key -> features) is shared between tuners of one
    workload; both are for benchmarks that run many tuners. ``transfer_cache`` keeps the features
    of the DB's records that transfer reads, for the tuners of one model's tasks to share
    (``cost_model.dataset.samples_from_db``). ``early_stop``: stop after this many
    trials without a better config (None: never). ``budget``: the trials this task will get in
    all, earlier ones included (None: unknown), for tuners that change course near the end.
    """

    workload: Workload
    target: Target
    db: Any = None
    transfer: bool = True
    early_stop: int | None = None
    transfer_samples: list | None = None
    feature_cache: dict | None = None
    transfer_cache: dict | None = None
    options: dict = field(default_factory=dict)  # extra tuner keyword options (e.g. eps, chains)
    budget: int | None = None
