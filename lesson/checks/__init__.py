"""Active checks: make the model prove it works (overfit one batch, the LR range test, numerical
gradient checks, batch independence), each leaving model and optimizer bitwise as they were."""
