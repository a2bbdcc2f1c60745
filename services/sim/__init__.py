"""`mediamesh simulate`: a discrete-event simulation of a fleet driving the real scheduler core.

The SchedulerCore the scheduler service runs is driven here with a virtual clock: arrivals
are submitted, dispatches become batches timed by the fleet's device speeds, completions and
spot preemptions are reported back, and KEDA resizes the pools on the core's own demand
metric. Modules, in the order data flows:

- scenario: the input file (fleet, device types, workload, spot, autoscaling, SLAs)
- load_checks, trace, errors: what loading refuses, against the registry, fleet and trace
- arrivals: poisson / bursty / diurnal / trace arrival arrays
- engine: the event loop and the calls into the core
- fleet, cluster, keda: devices, their lifecycle and the autoscaler
- records, report: per-job outcomes, statistics, JSON and PNG
- simulation: builds and runs it all; rightsize and validation build on it

Run `python -m mediamesh.sim SCENARIO` or `mediamesh simulate SCENARIO`.
"""
