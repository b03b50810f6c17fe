"""Symptom 1: the loss does not decrease (or barely moves, or oscillates)."""
