"""Common PyTorch bugs: the code runs and the loss is plausible, but what it computes is wrong."""
