"""The report's fidelity plot: the audit judge's agreement with the served reward, the
mean reward gap between the two, and the Goodhart alarms, over steps (docs/fidelity.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from amaris.sim.metrics import RunMetrics
from amaris.sim.plotting import figure, integer_steps, save


def has_audit(metrics: RunMetrics) -> bool:
    """Whether any step of the run was audited (the auditor was on)."""
    return any(s.get("audit") for s in metrics["steps"])


def _series(
    metrics: RunMetrics, key: Literal["agreement", "top_tail_agreement", "gap"]
) -> list[float]:
    values = [s["audit"][key] if "audit" in s else None for s in metrics["steps"]]
    return [float("nan") if v is None else float(v) for v in values]


def plot_fidelity(metrics: RunMetrics, path: Path, drift_step: int | None = None) -> None:
    """Rank agreement (Kendall's tau), top-tail agreement and mean |reward gap| per audited
    step; a red line at each alarmed step, a dotted one at ``drift_step`` when given."""
    steps = [s["step"] for s in metrics["steps"]]
    fig, ax = figure(9, 4)
    ax.plot(steps, _series(metrics, "agreement"), marker="o", label="agreement (Kendall's tau)")
    ax.plot(
        steps,
        _series(metrics, "top_tail_agreement"),
        marker="s",
        linestyle="--",
        label="top-tail agreement",
    )
    ax.plot(steps, _series(metrics, "gap"), marker="^", linestyle=":", label="mean |reward gap|")
    alarmed = [s["step"] for s in metrics["steps"] if "audit" in s and s["audit"]["alarm"]]
    for index, step in enumerate(alarmed):
        ax.axvline(step, color="red", linewidth=1.5, label="alarm" if index == 0 else None)
    if drift_step is not None:
        ax.axvline(drift_step - 0.5, color="black", linestyle=":", label="judge drifts")
    ax.set_xlabel("training step")
    ax.set_ylabel("fidelity")
    integer_steps(ax)
    ax.set_ylim(-1.05, 1.1)
    ax.set_title(f"{metrics['label']}: audit judge vs served reward (red: alarm)")
    save(fig, ax, path)
