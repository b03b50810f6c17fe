"""Bugs in a hand-written backward pass: the gradients themselves are wrong."""
