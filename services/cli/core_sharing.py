"""How `mediamesh up` shares one host's CPU cores between its CPU workers and the mesh.

torch sizes its intra-op pool to every core of the host, for each worker; several CPU
workers on one host then run more threads than there are cores, and the gateway and the
scheduler wait behind them. So a CPU worker that sets no `torch_threads` gets an equal share
of the cores less one, at least one thread; a worker's explicit `torch_threads` is kept as
it is. (The first measurement behind the spare core, one 1-thread worker beating one
2-thread worker on two cores, was taken while the worker's batch threads kept an OpenMP
team each; since they free them, a lone 2-thread worker is the faster at c=32: README,
Performance. The rule stands until it is measured with several workers and on larger
hosts; a host whose only work is one CPU worker should set `torch_threads` to every core.)
"""

from __future__ import annotations

from mediamesh.common.settings import MeshConfig


def shared_torch_threads(cores: int, cpu_workers: int) -> int:
    """Intra-op threads per CPU worker: the cores less one for the mesh, shared equally."""
    if cpu_workers <= 0:
        return 0
    return max(1, (cores - 1) // cpu_workers)


def with_shared_cores(config: MeshConfig, cores: int) -> MeshConfig:
    """`config` with each CPU worker that leaves `torch_threads` unset given its share."""
    unset = {w.worker_id for w in config.workers if w.device == "cpu" and not w.torch_threads}
    if not unset:
        return config
    threads = shared_torch_threads(cores, len(unset))
    workers = [
        w.model_copy(update={"torch_threads": threads}) if w.worker_id in unset else w
        for w in config.workers
    ]
    return config.model_copy(update={"workers": workers})
