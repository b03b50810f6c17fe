"""Shared test set-up: one compute thread per xdist worker (torch and NumPy's BLAS), so two
workers share two cores instead of oversubscribing them."""
import torch
from threadpoolctl import threadpool_limits

torch.set_num_threads(1)
threadpool_limits(1)

import gc

import pytest


@pytest.fixture(autouse=True)
def no_function_mode_left_behind():
    """A test leaves torch's function-mode stack as it found it once its objects are freed:
    a debugger's mode outliving its step would slow and confuse every later torch call."""
    before = len(torch.overrides._get_current_function_mode_stack())
    yield
    if len(torch.overrides._get_current_function_mode_stack()) > before:
        gc.collect()
    left = torch.overrides._get_current_function_mode_stack()[before:]
    assert not left, f"torch function modes left on the stack: {left}"
