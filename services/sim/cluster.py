"""The fleet over time: replicas starting, serving, draining, reclaimed and autoscaled.

Mirrors what Kubernetes and KEDA do to worker Deployments: a ReplicaSet replaces pods that
disappear, KEDA polls the scheduler's demand metric and resizes the Deployment, and a new
replica serves only after its start-up delay (node provisioning, image pull, model load).
"""

from __future__ import annotations

import random

from mediamesh.sim.engine import BATCH_DONE, GONE, NOTICE, POLL, READY, SAMPLE, Engine
from mediamesh.sim.fleet import Accounting, DeploymentState, Device, RunningBatch, Speed
from mediamesh.sim.keda import KedaScaler
from mediamesh.sim.records import TimeSeries
from mediamesh.sim.scenario import Scenario


class Cluster:
    def __init__(
        self,
        engine: Engine,
        scenario: Scenario,
        deployments: list[DeploymentState],
        speeds: dict[str, Speed],
        sample_s: float,
        seed: int,
    ) -> None:
        self.engine = engine
        self.core = engine.core
        self.deployments = deployments
        self.speeds = speeds
        self.startup_s = scenario.startup_s
        self.notice_s = scenario.spot.notice_s
        # Per second, per spot device.
        self.preempt_rate = scenario.spot.preemptions_per_device_hour / 3600
        self.sample_s = sample_s
        self.queues = sorted(scenario.scheduler.queues)
        self.rng = random.Random(seed)
        self.accounting = Accounting(
            {name: scenario.prices(name) for name in scenario.device_types}
        )
        self.series = TimeSeries()
        self.notices = 0
        self.scalers: dict[int, KedaScaler] = {}
        engine.handlers.update(
            {
                BATCH_DONE: self._on_batch_done,
                READY: self._on_ready,
                NOTICE: self._on_notice,
                GONE: self._on_gone,
                POLL: self._on_poll,
                SAMPLE: self._on_sample,
            }
        )

    def start(self) -> None:
        """The initial replicas serve from t=0; autoscalers and sampling begin polling."""
        for index, state in enumerate(self.deployments):
            for _ in range(state.target):
                self._on_ready(self._provision(index))
            autoscale = state.spec.autoscale
            if autoscale is not None:
                self.scalers[index] = KedaScaler(autoscale, 0.0, state.target)
                self.engine.at(autoscale.polling_s, POLL, index)
        if self.sample_s > 0:
            self._on_sample(None)

    def close(self) -> None:
        """Bill every device still provisioned up to the end of the run."""
        now = self.engine.now
        serving = [d for d in self.engine.devices.values() if d.gone_at is None]
        starting = [d for s in self.deployments for d in s.members if not d.ready]
        for device in serving + starting:
            if device.gone_at is None:
                device.gone_at = now
                self.accounting.close(device, now)

    # ---- lifecycle -------------------------------------------------------------------------

    def _provision(self, index: int) -> Device:
        state = self.deployments[index]
        state.started += 1
        device = Device(
            worker_id=f"{state.spec.name}-{state.started}",
            deployment=index,
            pool=state.spec.pool,
            device_type=state.spec.device,
            models=state.models,
            speed=self.speeds[state.spec.device],
            provisioned_at=self.engine.now,
        )
        state.members.append(device)
        return device

    def _start(self, index: int) -> None:
        self.engine.at(self.engine.now + self.startup_s, READY, self._provision(index))

    def _on_ready(self, device: Device) -> None:
        if device.gone_at is not None:
            return  # scaled away while still starting
        device.ready = True
        self.core.register_worker(device.info())
        self.engine.devices[device.worker_id] = device
        self.engine.idle += 1
        if device.pool == "spot" and self.preempt_rate > 0:
            notice_at = self.engine.now + self.rng.expovariate(self.preempt_rate)
            self.engine.at(notice_at, NOTICE, device)

    def _on_batch_done(self, payload: tuple[Device, RunningBatch]) -> None:
        device, batch = payload
        if self.engine.finish_batch(device, batch) and device.draining:
            self._remove(device, "scaled down")

    def _on_notice(self, device: Device) -> None:
        """Spot reclaim notice: drain now, checkpoint running jobs, vanish after the notice."""
        if device.gone_at is not None:
            return
        self.notices += 1
        state = self.deployments[device.deployment]
        if device in state.members:
            state.members.remove(device)
            # The ReplicaSet replaces a terminating pod at once; the new node takes start-up.
            if len(state.members) < state.target:
                self._start(device.deployment)
        self._drain(device)
        self.engine.preempt_batch(device)
        self.engine.at(self.engine.now + self.notice_s, GONE, device)

    def _on_gone(self, device: Device) -> None:
        if device.gone_at is None:
            self._remove(device, "spot instance reclaimed")

    def _drain(self, device: Device) -> None:
        if device.draining:
            return
        if device.batch is None:
            self.engine.idle -= 1
        device.draining = True
        self.core.heartbeat(device.worker_id, draining=True)

    def _remove(self, device: Device, reason: str) -> None:
        device.gone_at = self.engine.now
        self.core.worker_lost(device.worker_id, reason)
        self.engine.devices.pop(device.worker_id, None)
        self.accounting.close(device, self.engine.now)

    # ---- autoscaling -----------------------------------------------------------------------

    def _on_poll(self, index: int) -> None:
        state = self.deployments[index]
        spec = state.spec
        assert spec.autoscale is not None and spec.modality is not None
        if spec.autoscale.metric == "demand":
            metric = self.core.pool_demand_s(spec.modality, spec.pool)
        else:
            metric = self.core.pool_work_s[(spec.modality, spec.pool)]
        state.target = self.scalers[index].poll(self.engine.now, metric, len(state.members))
        self._scale(index)
        self.engine.at(self.engine.now + spec.autoscale.polling_s, POLL, index)

    def _scale(self, index: int) -> None:
        state = self.deployments[index]
        missing = state.target - len(state.members)
        for _ in range(missing):
            self._start(index)
        if missing >= 0:
            return
        # Drop what costs least to lose: replicas still starting, then idle, then busy ones.
        order = sorted(
            state.members, key=lambda d: (d.ready, d.batch is not None, -d.provisioned_at)
        )
        for device in order[:-missing]:
            state.members.remove(device)
            if not device.ready:
                device.gone_at = self.engine.now
                self.accounting.close(device, self.engine.now)
                continue
            self._drain(device)
            if device.batch is None:
                self._remove(device, "scaled down")

    # ---- sampling --------------------------------------------------------------------------

    def _on_sample(self, _: object) -> None:
        series, core = self.series, self.core
        series.t.append(self.engine.now)
        for queue in self.queues:
            depth = sum(v for (q, _), v in core.depth.items() if q == queue)
            series.depth.setdefault(queue, []).append(depth)
        for state in self.deployments:
            values = series.replicas.setdefault(state.spec.name, [0] * (len(series.t) - 1))
            values.append(state.ready_count)
        series.busy.append(sum(1 for d in self.engine.devices.values() if d.batch is not None))
        self.engine.check_backlog()
        self.engine.at(self.engine.now + self.sample_s, SAMPLE)
