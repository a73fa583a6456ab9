"""StepReport (``step_report``), Chrome trace writer (``chrome_trace``), rich tables (``tables``)."""
