"""Symptom 3: the loss turns into NaN or Inf and training is dead."""
