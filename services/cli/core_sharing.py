"""How `mediamesh up` shares one host's CPU cores between its CPU workers and the mesh.

torch sizes its intra-op pool to every core of the host, for each worker; several CPU
workers on one host then run more threads than there are cores, and the gateway and the
scheduler wait behind them. So a CPU worker that sets no `torch_threads` gets an equal share
of the cores less one and less those the workers that set `torch_threads` took, at least one
thread; a worker's explicit `torch_threads` is kept as it is. (The first measurement behind
the spare core, one 1-thread worker beating one 2-thread worker on two cores, was taken
while the worker's batch threads kept an OpenMP team each; since they free them, a lone
2-thread worker is the faster at c=32: README, Performance. The rule stands until it is
measured with several workers and on larger hosts; a host whose only work is one CPU
worker should set `torch_threads` to every core.)
"""

from __future__ import annotations

from mediamesh.common.settings import MeshConfig


def shared_torch_threads(cores: int, cpu_workers: int, taken: int = 0) -> list[int]:
    """Intra-op threads for each of `cpu_workers`: the cores less one for the mesh, less the
    `taken` threads of the workers that set their own, shared as evenly as whole threads
    allow (16 cores among 4 workers is 4, 4, 4 and 3, not 3 each with three cores idle);
    at least one each."""
    if cpu_workers <= 0:
        return []
    base, extra = divmod(max(cores - 1 - taken, 0), cpu_workers)
    return [max(1, base + (index < extra)) for index in range(cpu_workers)]


def with_shared_cores(config: MeshConfig, cores: int) -> MeshConfig:
    """`config` with each CPU worker that leaves `torch_threads` unset given its share."""
    cpu_workers = [w for w in config.workers if w.device == "cpu"]
    unset = [w.worker_id for w in cpu_workers if not w.torch_threads]
    if not unset:
        return config
    taken = sum(w.torch_threads for w in cpu_workers if w.torch_threads)
    shares = dict(zip(unset, shared_torch_threads(cores, len(unset), taken), strict=True))
    workers = [
        w.model_copy(update={"torch_threads": shares[w.worker_id]}) if w.worker_id in shares else w
        for w in config.workers
    ]
    return config.model_copy(update={"workers": workers})
