"""fastsm's own warning classes, to filter on (``warnings.simplefilter("ignore", fastsm.ExtrapolationWarning)``)."""

from __future__ import annotations

__all__ = ["ExtrapolationWarning"]


class ExtrapolationWarning(RuntimeWarning):
    """Test inputs lie outside the training inputs' kernel support; their prediction is the start unchanged.

    Issued once per public call (``tgp.predict``, the scikit-learn estimators' ``predict``), counting
    the points; ``Prediction.extrapolated`` says which.  A ``RuntimeWarning``, so existing filters on
    that class still apply.
    """
