"""Data checks: validate a data set (validate.py), find mislabeled rows and labels without signal
(labels.py), and locate the first operation that made a NaN or Inf (nonfinite.py)."""
