"""Shared test set-up: one torch thread per xdist worker, so two workers share two cores."""
import torch

torch.set_num_threads(1)
