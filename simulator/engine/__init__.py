"""Mechanism: the simpy executor, recorded spans, interval arithmetic and task costing.

The only package that imports simpy (ARCHITECTURE.md §1).
"""
