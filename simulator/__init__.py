"""dtsim: a distributed-training simulator for large language models.

The import package is ``simulator``; the distribution and console script are ``dtsim``.
"""

__version__ = "0.1.0"
