"""Sequence and language models: attention, masks, padding and next-token targets, where a
model can read the answer it should predict, or learn from tokens that are not there."""
