"""Compute model: roofline op times per GPU and dtype (``compute``), efficiency data (``efficiency.yaml``)."""
