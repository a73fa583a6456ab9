"""From one step to the whole run: duration, failures and checkpoints, cost and energy.

Pure models (no simpy, no I/O): ``reliability`` holds the checkpoint-interval and expected-runtime
mathematics, ``checkpoint`` the checkpoint size and write time, ``plan`` composes them with the
simulated step into a ``RunReport``.
"""
