"""The reference debugger: `NetworkDebugger` (monitor.py) and what it stands on.

monitor.py reads as the lesson's debugger: what it measures, when, and how it decides. The
machinery that keeps it cheap (hook scheduling, batched host transfers, buffers) is engine.py;
the statistics are stats.py, the decisions rules.py, and the loss-input and batch inspectors
loss_inputs.py and batches.py.
"""
