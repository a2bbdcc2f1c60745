"""A job's ended states by name, as every face spells them (mediamesh.v1.JobState).

The scheduler's core, the SDK and the gateway's HTTP routes each have their own view of a
job; this is the one place that says which of its states are final.
"""

from __future__ import annotations

# The states a job ends in, with a result (SUCCEEDED) or without one.
ENDED_STATE_NAMES = frozenset({"SUCCEEDED", "FAILED", "CANCELLED", "EXPIRED"})
