"""Where the debugger's records go in a long run: sinks (JSONL, TensorBoard, W&B), alerts, plots.

Nothing here knows the debugger: each part takes plain records or findings.
"""
