"""Measurement on a Dask cluster: candidates are built and run as Dask tasks, builds on any worker,
runs only on workers that declare the target's measuring resource (``cluster.measure_resource``),
one runner per device. ``DaskMeasurer`` is what the tuning loop measures through (pipelined: see
``autotune.search.tune``); ``cluster`` connects to or starts a cluster; ``workers`` is the per-host
launcher. Needs ``pip install "dask[distributed]"`` (the ``[dask]`` extra); nothing here is imported
on the local path."""

from .cluster import ClusterError, connect, measure_resource, measuring_workers
from .measurer import DaskMeasurer

__all__ = ["ClusterError", "DaskMeasurer", "connect", "measure_resource", "measuring_workers"]
