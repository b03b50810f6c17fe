"""The debugger's text report: findings with evidence and fixes, then per-layer tables."""
from __future__ import annotations

from typing import Any

from lesson.debugger.rules import tail_trend


def _num(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3g}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_num(x) for x in list(v)[:6]) + (", ..." if len(v) > 6 else "") + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {_num(x)}" for k, x in list(v.items())[:6]) + "}"
    return str(v)


def format_report(debugger: Any) -> str:
    """Everything `print_report()` prints, as one string (`debugger` is a `NetworkDebugger`;
    this module reads only its public views, so it need not import the monitor)."""
    findings = debugger.diagnose()
    losses = debugger.loss_history
    lines = ["", "=== NETWORK DEBUGGER REPORT ==="]
    if findings:
        lines.append(f"\nFindings ({len(findings)}, causes first):")
        for f in findings:
            where = f" [{f.layer}]" if f.layer else ""
            when = f" (from step {f.step})" if f.step is not None else ""
            lines.append(f"  {f.severity.name:<8} {f.code}{where}{when}: {f.message}")
            if f.explained_by:
                lines.append(f"           follows from {f.explained_by} (above): fix that first")
            if f.evidence:
                lines.append("           evidence: " + ", ".join(
                    f"{k}={_num(v)}" for k, v in f.evidence.items() if v is not None))
            lines.append(f"           fix: {f.advice}")
    verdict = debugger.check_loss_health()
    if not findings:
        lines.append("\nFindings: none, the run looks healthy." if verdict == "HEALTHY" else
                     f"\nFindings: none from the statistics, but the loss says {verdict}.")
    if verdict == "HEALTHY" and findings:   # never "healthy" beside findings that say otherwise
        lines.append(f"\nLoss health: the lesson's loss checks pass (the tail of the curve "
                     f"{tail_trend(losses)}), but the findings above are not healthy.")
    else:
        lines.append(f"\nLoss health: {verdict}")
    if losses:
        lines.append(f"  Last 5 losses: {[f'{v:.4f}' for v in losses[-5:]]}")
    lines.append("\nPer-layer activation stats (latest statistics step):")
    for name, s in debugger.activation_stats.items():
        dead = "" if s["dead_fraction"] is None else f" dead={s['dead_fraction']:.0%}"
        lines.append(f"  {name}: mean={s['mean']:.4f} std={s['std']:.4f} "
                     f"zero={s['fraction_zero']:.1%}{dead} across-batch std={s['sample_std']:.2e}")
    lines.append("\nPer-layer gradient stats (from parameter gradients):")
    for name, s in debugger.gradient_stats.items():
        lines.append(f"  {name}: abs_mean={s['abs_mean']:.2e} max={s['max']:.2e} "
                     f"norm={s['norm']:.2e}")
    if debugger.errors:
        lines.append("\nStatistics that could not be taken:")
        lines += [f"  {e}" for e in debugger.errors]
    return "\n".join(lines)
