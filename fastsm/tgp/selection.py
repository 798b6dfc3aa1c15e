"""The result of a hyperparameter selection (:class:`Selection`, returned by :func:`fastsm.tgp.select`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fastsm.tgp.model import TGPModel, TGPParams
from fastsm.tgp.search import COLUMNS


@dataclass(frozen=True, eq=False)
class Selection:
    """Result of :func:`select`.

    Attributes
    ----------
    params : TGPParams
        The grid point with the lowest mean error (first of ties).
    model : TGPModel
        Refit on all the data with ``params``.
    table : dict of str to ndarray
        One entry per setting scored: the hyperparameters (``gamma_x`` …
        ``beta``, widths as numbers), ``mean`` and ``std`` of the error over
        the folds (for leave-one-out: over the points), ``converged`` and
        ``extrapolated`` (shares of the validation predictions that
        converged, and whose input lay outside the kernel support),
        ``screen`` (True: an alpha scored on the screen's subsample of the
        leave-one-out points, not a candidate of the final choice),
        ``method`` (the predictor scored: KLTGP on the kernel rows of a
        coordinate search for SMTGP).
    best_index : int
        Row of ``params`` in ``table``.
    method : str
        The predictor selected (``select(method="auto")``: ``"kl"`` or ``"sm"``).
    scoring : str
    cv : str or int
    n_factorizations : int
        ``N×N`` factorisations done (kernel settings × folds × (2 + alphas)).
    seconds : float
        Wall time of the selection (the final refit included).
    """

    params: TGPParams
    model: TGPModel
    table: dict
    best_index: int
    method: str
    cv: str | int
    scoring: str
    n_factorizations: int
    seconds: float

    @property
    def best_score(self) -> float:
        """Mean validation error of :attr:`params`."""
        return float(self.table["mean"][self.best_index])

    def format_table(self, top: int | None = None) -> str:
        """The score table as text, best first (``top`` rows)."""
        order = np.argsort(self.table["mean"], kind="stable")[:top]
        head = "  ".join(f"{c:>9}" for c in (*COLUMNS, "mean", "std", "conv."))
        lines = [head, "-" * len(head)]
        for i in order:
            vals = [f"{self.table[c][i]:9.4g}" for c in COLUMNS]
            vals += [f"{self.table['mean'][i]:9.5f}", f"{self.table['std'][i]:9.5f}",
                     f"{self.table['converged'][i]:9.1%}"]
            lines.append("  ".join(vals))
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (f"Selection(method={self.method!r}, cv={self.cv!r}, scoring={self.scoring!r}, "
                f"n_grid={len(self.table['mean'])}, best_score={self.best_score:.6g}, params={self.params!r})")
