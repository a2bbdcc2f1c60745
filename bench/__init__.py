"""Benchmarks and the fleet simulator."""
