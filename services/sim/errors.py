"""The simulator's refusal of a scenario: its own module, so that the scenario and the trace
reader it checks at load can both raise it."""

from __future__ import annotations


class ScenarioError(ValueError):
    """A scenario file that cannot be used, with the field at fault."""
