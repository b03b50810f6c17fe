"""Step-time overhead of logging the debugger's statistics, beside wandb.watch's.

The model is the debugger issue's 512-1024-1024-10 MLP, batch 256, Adam, torch.set_num_threads(2).
Each configuration trains its own copy of the model. A round is `--steps` steps (default 100,
so each round holds exactly one log step) of every configuration, interleaved step by step in
a shuffled order, so machine noise hits all of them alike; each configuration's round time is
divided by the plain one's, and the median over rounds is printed.

  plain                     no monitoring
  ours, no sink             NetworkDebugger(model, opt): its statistics alone, default schedule
  ours, JSONL log_every=100 NetworkDebugger(model, opt, log_every=100,
                            sinks=[JSONLSink(...)]), default statistics schedule
  wandb.watch defaults      wandb.watch(model) (log="gradients", log_freq=1000), offline run,
                            and the loss sent with wandb.log every 100 steps (the same cadence)

Usage: python benchmarks/bench_logging_overhead.py [--rounds 10] [--steps 100]
Target (issue 8): ours <= 1.02.
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from typing import Any

import torch
from torch import nn

from workload import make_batch, make_model

from lesson.debugger.monitor import NetworkDebugger
from lesson.production.sinks import JSONLSink, read_jsonl

LOG_EVERY = 100


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=LOG_EVERY)
    args = parser.parse_args()
    x, y = make_batch(0)
    criterion = nn.CrossEntropyLoss()
    tmp = tempfile.mkdtemp(prefix="nndebug-bench-")

    configs: dict[str, dict[str, Any]] = {}
    for name in ["plain", "ours, no sink", "ours, JSONL", "wandb.watch"]:
        model = make_model(1)
        opt = torch.optim.Adam(model.parameters(), lr=1e-4)
        configs[name] = {"model": model, "opt": opt, "dbg": None, "run": None, "step": 0}
    configs["ours, no sink"]["dbg"] = NetworkDebugger(configs["ours, no sink"]["model"],
                                                      configs["ours, no sink"]["opt"])
    jsonl = os.path.join(tmp, "stats.jsonl")
    configs["ours, JSONL"]["dbg"] = NetworkDebugger(
        configs["ours, JSONL"]["model"], configs["ours, JSONL"]["opt"],
        log_every=LOG_EVERY, sinks=[JSONLSink(jsonl)])
    wandb_note = ""
    try:
        os.environ.update(WANDB_MODE="offline", WANDB_SILENT="true", WANDB_DIR=tmp)
        import wandb

        run = wandb.init(project="nndebug-bench", dir=tmp, mode="offline")
        run.watch(configs["wandb.watch"]["model"])       # its defaults
        configs["wandb.watch"]["run"] = run
    except Exception as exc:  # wandb is an optional extra
        wandb_note = f"wandb.watch not measured ({type(exc).__name__}: {exc})"
        del configs["wandb.watch"]

    def one_step(cfg: dict[str, Any]) -> float:
        model, opt, dbg, run = cfg["model"], cfg["opt"], cfg["dbg"], cfg["run"]
        start = time.perf_counter()
        opt.zero_grad()
        loss = criterion(model(x), y)
        if dbg is not None:
            dbg.record_loss(loss.detach())
        loss.backward()
        opt.step()
        cfg["step"] += 1
        if run is not None and cfg["step"] % LOG_EVERY == 0:
            run.log({"loss": loss.item()}, step=cfg["step"])
        return time.perf_counter() - start

    def block(steps: int) -> dict[str, float]:
        """`steps` steps of every configuration, interleaved step by step in a shuffled order,
        so load changes on a shared machine hit all of them alike; total seconds each."""
        totals = dict.fromkeys(configs, 0.0)
        order = list(configs)
        for _ in range(steps):
            random.shuffle(order)
            for n in order:
                totals[n] += one_step(configs[n])
        return totals

    block(args.steps)  # warm-up: allocator, the debugger's warm-up steps, one log step each
    ratios: dict[str, list[float]] = {n: [] for n in configs if n != "plain"}
    plain_times = []
    for i in range(args.rounds):
        totals = block(args.steps)  # one log step of ours per round
        plain_times.append(totals["plain"] / args.steps)
        for n in ratios:
            ratios[n].append(totals[n] / totals["plain"])
        print(f"round {i + 1}/{args.rounds}: " + ", ".join(
            f"{n} {rs[-1]:.3f}" for n, rs in ratios.items()), file=sys.stderr, flush=True)
    if configs.get("wandb.watch"):
        configs["wandb.watch"]["run"].finish()
    dbg = configs["ours, JSONL"]["dbg"]
    dbg.close()
    lines = read_jsonl(jsonl)

    print(f"MLP 512-1024-1024-10, batch 256, Adam, 2 threads; {args.rounds} rounds x "
          f"{args.steps} steps, plain step {statistics.median(plain_times) * 1e3:.1f} ms")
    print(f"{'configuration':<34} {'median ratio':>12}  target")
    labels = {"ours, no sink": ("ours, no sink (statistics only)", "(issue 2: <= 1.02)"),
              "ours, JSONL": (f"ours, JSONL log_every={LOG_EVERY}", "<= 1.02"),
              "wandb.watch": ("wandb.watch defaults (offline)", "(reference)")}
    for n, rs in ratios.items():
        label, target = labels[n]
        print(f"{label:<34} {statistics.median(rs):>12.3f}  {target}")
    if wandb_note:
        print(wandb_note)
    print(f"JSONL lines written: {len(lines)} (steps {lines[0]['step']}..{lines[-1]['step']})")


if __name__ == "__main__":
    main()
