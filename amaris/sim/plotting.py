"""The simulator's plots: matplotlib on its file-only backend (Agg), and the finish every
figure of a report shares. Only the report modules import it (the ``sim`` extra)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display, before pyplot picks one

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator


def figure(width: float, height: float) -> tuple[Figure, Axes]:
    """A new figure of ``width`` x ``height`` inches and its one plot."""
    fig, ax = plt.subplots(figsize=(width, height))
    return fig, ax


def integer_steps(ax: Axes) -> None:
    """Ticks of the step axis at whole steps only."""
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def save(fig: Figure, ax: Axes, path: Path, *, legend_outside: bool = True) -> None:
    """The legend (right of the plot, or inside it), then ``path`` as a 100 dpi image; the
    figure is closed."""
    if legend_outside:
        ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.0, 0.5))
    else:
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
