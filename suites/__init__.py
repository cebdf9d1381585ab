"""Embedded task suites: deterministic, seeded generators of the demo's data."""
