"""Armijo backtracking, as scalar decisions shared by every batched solver.

The batched optimisers evaluate all points that are still searching at once,
then ask these helpers, per point, whether the trial is accepted and, if not,
which step to try next.  Minimising variant for TGP, maximising for KLIEP.
"""

from __future__ import annotations

import numpy as np

from fastsm.config import kernel


@kernel()
def armijo_accept_min(f0, f_trial, t, slope, c1):
    """``f(x + t p) <= f(x) + c1 t g^T p`` (``slope = g^T p < 0``); NaN rejects."""
    return np.isfinite(f_trial) and f_trial <= f0 + c1 * t * slope


@kernel()
def approx_wolfe_accept_min(f0, f_trial, slope0, slope_trial, eps):
    """Hager & Zhang's approximate Wolfe test (CG_DESCENT, 2005).

    Accepts when ``f`` rose by at most ``eps |f0|`` (rounding noise; :data:`fastsm.config.WOLFE_EPS`) and the
    directional derivative at the trial lies in ``[0.9 slope0, -0.8 slope0]``:
    the step went down far enough without overshooting.  Needed where the
    objective's rounding noise (~1e-8 relative for IKLTGP with lambda = 1e-4)
    exceeds the decrease Armijo asks for near the minimum, while the
    gradient is still accurate.
    """
    return (
        np.isfinite(f_trial)
        and f_trial <= f0 + eps * abs(f0)
        and 0.9 * slope0 <= slope_trial <= -0.8 * slope0
    )


@kernel()
def backtrack(f0, f_trial, t, slope):
    """Next trial step after a rejection: safeguarded quadratic interpolation.

    The minimiser of the quadratic through ``f0``, ``slope`` and ``f_trial``,
    clipped to ``[0.1 t, 0.5 t]``; ``0.1 t`` when ``f_trial`` is not finite.
    Works for both variants (pass ``-f`` and ``-slope`` to maximise).
    """
    if not np.isfinite(f_trial):
        return 0.1 * t
    denom = 2.0 * (f_trial - f0 - slope * t)
    if denom <= 0.0:
        return 0.5 * t
    t_new = -slope * t * t / denom
    if t_new < 0.1 * t:
        return 0.1 * t
    if t_new > 0.5 * t:
        return 0.5 * t
    return t_new
