"""Where a simulator sweep's tasks run: here, over forked processes, or on a Dask cluster (``--dask``).

A sweep's tasks (one router x pattern x seed over rising loads) are independent, so any worker
may run any of them; results come back as they finish and the sweep writes the same CSV and plot
as with ``--jobs``. The runs are deterministic per seed, so the numbers do not depend on where
they ran. Dask distributed rather than Ray: it is pure Python and installs from PyPI with the
project (no separate runtime, object store or daemon), a cluster is ``dask scheduler`` plus
``dask worker ADDRESS`` on each machine (or a ``LocalCluster`` here), and coarse independent
tasks with futures are all a sweep needs. Workers need hpcfabric installed and, for a topology
given as a path, the same file at that path; a fabric without a source file travels pickled.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from hpcfabric.errors import ConfigError

__all__ = ["dask_map", "map_tasks"]


def map_tasks(fn: Callable[[Any], Any], tasks: Sequence[Any], jobs: int, dask: str | None,
              collect: Callable[[Any], None]) -> None:
    """``collect(fn(task))`` for every task: in this process, over ``jobs`` forked processes (which
    inherit the caller's precomputed state), or on a Dask cluster (``dask``: 'local' or an address)."""
    if dask:
        dask_map(fn, tasks, dask, jobs, collect)
    elif jobs > 1 and len(tasks) > 1:
        import multiprocessing as mp

        with mp.get_context("fork").Pool(min(jobs, len(tasks))) as pool:
            for got in pool.imap_unordered(fn, tasks):
                collect(got)
    else:
        for task in tasks:
            collect(fn(task))


def dask_map(fn: Callable[[Any], Any], tasks: Sequence[Any], address: str, workers: int,
             collect: Callable[[Any], None]) -> None:
    """``collect(fn(task))`` for every task, run on the Dask scheduler at ``address`` or, for
    ``'local'``, on a local cluster of ``workers`` single-threaded worker processes."""
    try:
        from dask.distributed import Client, LocalCluster, as_completed
    except ImportError:
        raise ConfigError("Dask is not installed: pip install 'distributed' (or hpcfabric[dask])", field="--dask") from None
    cluster = None
    if address == "local":
        cluster = LocalCluster(n_workers=max(1, workers), threads_per_worker=1, processes=True,
                               dashboard_address=None)
        client = Client(cluster)
    else:
        try:
            client = Client(address, timeout=30)
        except (OSError, TimeoutError) as why:
            raise ConfigError(f"cannot reach the Dask scheduler at {address}: {why}", field="--dask") from None
    try:
        futures = client.map(fn, list(tasks), pure=False)
        for fut in as_completed(futures):
            collect(fut.result())
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
