"""Armijo backtracking, as scalar decisions shared by every batched solver.

The batched optimisers evaluate all points that are still searching at once,
then ask these helpers, per point, whether the trial is accepted and, if not,
which step to try next.  Minimising variant for TGP, maximising for KLIEP.
"""

from __future__ import annotations

import numpy as np

from fastsm.config import kernel

#: Sufficient-decrease constant of the Armijo condition.
ARMIJO_C1 = 1e-4


@kernel()
def armijo_accept_min(f0, f_trial, t, slope):
    """``f(x + t p) <= f(x) + c1 t g^T p`` (``slope = g^T p < 0``); NaN rejects."""
    return np.isfinite(f_trial) and f_trial <= f0 + ARMIJO_C1 * t * slope


#: Relative objective noise tolerated by the approximate Wolfe test: Hager & Zhang's ``epsilon``
#: (CG_DESCENT's default).  It bounds the rounding noise of the values, which grows with the
#: conditioning of the kernel matrices: ~1e-10 relative on Toy 1 (lambda = 1e-4), but up to 2e-5 on a
#: set of near-duplicate rows at lambda = 1e-8, where the decrease left near the minimum is smaller
#: than the noise.  With 1e-10 (before #55) such searches found no decrease, and the points stopped
#: up to 2.5e-3 of the output spread from the minimum; the slope window of the test, from the
#: accurate gradient, is what keeps a step from going up (docs/accuracy.md).
APPROX_WOLFE_EPS = 1e-6


@kernel()
def approx_wolfe_accept_min(f0, f_trial, slope0, slope_trial):
    """Hager & Zhang's approximate Wolfe test (CG_DESCENT, 2005).

    Accepts when ``f`` rose by at most ``eps |f0|`` (rounding noise) and the
    directional derivative at the trial lies in ``[0.9 slope0, -0.8 slope0]``:
    the step went down far enough without overshooting.  Needed where the
    objective's rounding noise (~1e-8 relative for IKLTGP with lambda = 1e-4)
    exceeds the decrease Armijo asks for near the minimum, while the
    gradient is still accurate.
    """
    return (
        np.isfinite(f_trial)
        and f_trial <= f0 + APPROX_WOLFE_EPS * abs(f0)
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
