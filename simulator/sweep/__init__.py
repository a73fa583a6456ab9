"""Sweeps: grids of overrides over a base scenario, each point a full simulation, results written
incrementally and atomically, resumable, on a local process pool or a Ray cluster."""
