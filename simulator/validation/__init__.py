"""Validation against published runs: the bundled suite (``runs.yaml``), simulating it (``suite``),
errors and summaries (``summary``), writers (``render``), the calibration fit (``calibration``) and
prediction intervals from the validated runs' out-of-sample residuals (``intervals``, ``intervals.yaml``)."""
