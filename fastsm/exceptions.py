"""fastsm's own warning classes, to filter on (``warnings.simplefilter("ignore", fastsm.ExtrapolationWarning)``)."""

from __future__ import annotations

__all__ = ["CacheWarning", "ExtrapolationWarning"]


class ExtrapolationWarning(RuntimeWarning):
    """Test inputs lie outside the training inputs' kernel support; their prediction is the start unchanged.

    Issued once per public call (``tgp.predict``, the scikit-learn estimators' ``predict``), counting
    the points; ``Prediction.extrapolated`` says which.  A ``RuntimeWarning``, so existing filters on
    that class still apply.
    """


class CacheWarning(RuntimeWarning):
    """Numba's cache could not be used as it is: an entry that cannot be read back (damaged, or compiled
    against code that has changed) is compiled again and replaced, and a kernel that cannot be saved (no
    space, no permission) runs from memory; or the kernels cannot be cached at all (no writable folder).

    Nothing is wrong with the results: the warning says where the time of compiling goes.  A
    ``RuntimeWarning``, so existing filters on that class still apply.
    """
