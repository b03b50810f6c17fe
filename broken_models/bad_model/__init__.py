"""Symptom 2: the loss decreases, but the model is bad (or looks better than it is)."""
