"""Search: tuners (random, grid) and the tuning loop that feeds the records DB."""

from .measure_batch import Trial, WorkloadMeasurer
from .tune import TuneOptions, TuneSummary, tune_workload, workload_label
from .tuner import STRATEGIES, GridTuner, RandomTuner, Tuner, make_tuner

__all__ = ["STRATEGIES", "GridTuner", "RandomTuner", "Trial", "TuneOptions", "TuneSummary", "Tuner",
           "WorkloadMeasurer", "make_tuner", "tune_workload", "workload_label"]
