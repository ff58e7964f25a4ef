"""The report's fidelity plot: the audit judge's agreement with the served reward, the
mean reward gap between the two, and the Goodhart alarms, over steps (docs/fidelity.md)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal

from matplotlib.axes import Axes
from matplotlib.figure import Figure

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


SERIES: tuple[tuple[Literal["agreement", "top_tail_agreement", "gap"], str, str, str], ...] = (
    ("agreement", "agreement (Kendall's tau)", "o", "-"),
    ("top_tail_agreement", "top-tail agreement", "s", "--"),
    ("gap", "mean |reward gap|", "^", ":"),
)
"""Each line of the plot: its audit figure, its legend entry, its marker and line style."""


def fidelity_axes(metrics: RunMetrics, drift_step: int | None = None) -> tuple[Figure, Axes]:
    """The plot: rank agreement (Kendall's tau), top-tail agreement and mean |reward gap|
    per audited step, a line only when the run has a value of it; each audited step's
    sample size above it; a red line at each alarmed step, a dotted one at ``drift_step``
    when given."""
    steps = [s["step"] for s in metrics["steps"]]
    fig, ax = figure(9, 4)
    for key, label, marker, line in SERIES:
        values = _series(metrics, key)
        if any(not math.isnan(v) for v in values):  # no legend entry for a line not drawn
            ax.plot(steps, values, marker=marker, linestyle=line, label=label)
    for step in metrics["steps"]:
        if "audit" in step:
            ax.annotate(
                f"n={step['audit']['sampled']}",
                (step["step"], 1.1),
                ha="center",
                va="top",
                fontsize=7,
            )
    alarmed = [s["step"] for s in metrics["steps"] if "audit" in s and s["audit"]["alarm"]]
    for index, step_number in enumerate(alarmed):
        ax.axvline(step_number, color="red", linewidth=1.5, label="alarm" if index == 0 else None)
    if drift_step is not None:
        ax.axvline(drift_step - 0.5, color="black", linestyle=":", label="judge drifts")
    ax.set_xlabel("training step")
    ax.set_ylabel("fidelity")
    integer_steps(ax)
    ax.set_ylim(-1.05, 1.15)
    ax.set_title(f"{metrics['label']}: audit judge vs served reward (n: audit sample size)")
    return fig, ax


def plot_fidelity(metrics: RunMetrics, path: Path, drift_step: int | None = None) -> None:
    """:func:`fidelity_axes`, saved at ``path``."""
    fig, ax = fidelity_axes(metrics, drift_step)
    save(fig, ax, path)
