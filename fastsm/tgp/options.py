"""A prediction's options: built and validated once by the API, taken whole by every layer below it."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from fastsm import config
from fastsm._threads import resolve_threads
from fastsm._validation import check_choice, check_int, check_scalar
from fastsm.tgp.fitting import METHODS


@dataclasses.dataclass(frozen=True)
class PredictOptions:
    """What :func:`fastsm.tgp.predict` and :func:`fastsm.tgp.loo_predict` were asked for (their docstrings
    say what each field means), checked on construction: an instance is valid, and
    :func:`dataclasses.replace` checks the fields it changes again.

    ``init`` is checked against the points where their number is known (:func:`fastsm.tgp.prediction.start`);
    ``max_iter`` is capped at :data:`fastsm.config.MAX_ITER_CAP`; ``None`` is
    :func:`fastsm.config.default_max_iter` of the model's output dimension (:meth:`iterations`).
    """

    method: str = "sm"
    init: Any = None  # None, "linear", "kl" or an array of starts
    max_iter: int | None = None
    tol: float = config.DEFAULT_TOL
    ftol: float = config.DEFAULT_FTOL
    trust_radius: float = config.DEFAULT_TRUST_RADIUS
    optimizer: str = "bfgs"
    batch_size: int = config.DEFAULT_BATCH_SIZE
    threads: int | None = None
    progress: bool | Callable[[int, int], None] = False

    def __post_init__(self) -> None:
        check_choice("method", self.method, METHODS)
        check_choice("optimizer", self.optimizer, ("bfgs", "gd"))
        fields = {
            "max_iter": None if self.max_iter is None else min(check_int("max_iter", self.max_iter, low=0),
                                                               config.MAX_ITER_CAP),
            "tol": check_scalar("tol", self.tol, low=0.0),
            "ftol": check_scalar("ftol", self.ftol, low=0.0),
            "trust_radius": check_scalar("trust_radius", self.trust_radius, low=0.0, low_open=True),
            "batch_size": check_int("batch_size", self.batch_size, low=1),
        }
        if self.threads is not None:
            resolve_threads(self.threads)  # a TypeError or ValueError naming ``threads``
        for name, value in fields.items():  # normalised (e.g. numpy scalars to Python's)
            object.__setattr__(self, name, value)

    def iterations(self, dy: int) -> int:
        """The iteration budget per point for ``dy`` outputs: ``max_iter``, or the default rule's."""
        return config.default_max_iter(dy) if self.max_iter is None else self.max_iter

    @property
    def bfgs(self) -> bool:
        """Quasi-Newton (else gradient descent)."""
        return self.optimizer == "bfgs"
