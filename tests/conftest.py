"""Shared test set-up: one compute thread per xdist worker (torch and NumPy's BLAS), so two
workers share two cores instead of oversubscribing them."""
import torch
from threadpoolctl import threadpool_limits

torch.set_num_threads(1)
threadpool_limits(1)
