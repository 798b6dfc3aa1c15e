"""TGP prediction objectives: value and gradient per test point (docs/math.md §3), from factors.

With ``K = L L^T`` (lower triangular) and ``W = L^-1`` every Schur complement is
``eta = k(z,z) - ||W k||^2``, a sum of squares, and ``K^-1 k = W^T (W k)`` (docs/accuracy.md; with
explicit inverses ``eta`` lost ``cond(K) eps / eta``: 3e-6 relative on Toy 1).  A model holds
``L`` (Cholesky form: every "product with ``W``" below is a substitution) or ``W`` itself (inverse
form); the products' plan says which.  Per evaluation only products with ``y``'s kernel row ``k``
are new; :func:`evaluate_rows` computes them for a whole batch of points by the row loops
(:func:`~fastsm._kernels.tri_rows.run_products`, four rows sweeping a factor together),
in stages with O(N) per-row work between them:

========  ===========================================  ==========================================
method    stages (``fwd``: ``x -> W x``; ``bwd``: ``x -> W^T x``)  per-point ``F`` row (depends on ``x``)
========  ===========================================  ==========================================
KL        ``z = W_Y k``; ``u_y = W_Y^T z``               ``u_x = K_X^-1 k_x``
SM        ``z = W_Y k``, ``z_xy = (1-a) g + a W_XY k``;   ``g = W_XY k_x``
          ``u_y = W_Y^T z``, ``u_xy = W_XY^T z_xy``
IKL       ``z = W_Y k``; ``t = G^T z``; ``s = G t``;      ``g = W_Y k_x``
          ``W_Y^T (-2 g + 2 s - 2 (log(eta_y/eta_x) + 1) z)``
SM_CUBIC  O(N^3) reference form                        ``k_x``
========  ===========================================  ==========================================

with ``G = W_Y L_X``: IKLTGP's ``u_y^T K_X u_y = ||t||^2`` and ``k_x^T u_y = g . z``.  Every
method also has ``eta_x`` per point.  The flops per row equal those of the explicit-inverse
products they replace (two triangular products cost one full one), plus the zeros of each
panel's diagonal block.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from fastsm._kernels.cubic import cubic_rows
from fastsm._kernels.kliep_problem import dot_lanes
from fastsm._kernels.rbf import combine_weights, contract_lanes, kernel_row
from fastsm._kernels.shared import call
from fastsm._kernels.tri_rows import ProductPlan, run_products
from fastsm.config import kernel

KL = 0
IKL = 1
SM = 2
SM_CUBIC = 3

#: Row buffers of :func:`workspace`: kernel rows, two forward and two backward products.
K_ROW, Z1_ROW, Z2_ROW, R1_ROW, R2_ROW = 0, 1, 2, 3, 4


@kernel(inline=True)
def objective_plan(plan, method):
    """The :class:`~fastsm._kernels.tri_rows.ProductPlan` of ``method``'s objective on a model whose products run
    by ``plan`` (its factors' plan, :func:`fastsm.tgp.views.products_plan`): IKLTGP's second factor ``G`` is
    explicit in every form, so it is multiplied; every other factor as the model's."""
    return ProductPlan(plan.solve & 1) if method == IKL else plan


class Objective(NamedTuple):
    """One method's objective of a fitted model: what every evaluation reads (docs/math.md §3)."""

    method: int  # KL, IKL, SM or SM_CUBIC
    Z: np.ndarray  # training outputs, N × dy
    gamma: float  # the output kernel's gamma_y
    kyy: float  # k_Y(y, y) = 1 + lambda_y
    kxx: float  # k_X(x, x) = 1 + lambda_x
    alpha: float
    beta: float  # SM degree; 1.0 is the beta-free form the optimiser minimises
    floor: float  # floor of eta_y and eta_xy (hits are counted)
    W1: np.ndarray  # W_Y = L_Y^-1 (lower triangular)
    W2: np.ndarray  # W_XY (SM), G = W_Y L_X (IKL), W_Y (KL, SM_CUBIC)
    logdet_y: float  # log |K_Y| (SM_CUBIC only)
    logdet_x: float  # log |K_X| (SM_CUBIC only)
    Zt: np.ndarray  # Z transposed, dy × N, C-ordered (every kernel row reads it)
    V1: np.ndarray  # leave-one-out only (else 0 × 0): row h holds column h of W_Y = L_Y^-1 (project_out)
    V2: np.ndarray  # the same of W_XY (SM); V1 otherwise


class Points(NamedTuple):
    """What depends on the test input only, one row per point (the table above)."""

    F: np.ndarray
    eta_x: np.ndarray
    held: np.ndarray  # int64: the training point left out of the point's model (exact leave-one-out), -1: none


class Evaluations(NamedTuple):
    """Outputs of :func:`evaluate_rows`, one row per evaluated row."""

    value: np.ndarray
    grad: np.ndarray
    eta_y: np.ndarray
    eta_xy: np.ndarray
    hits: np.ndarray  # eta floor hits


class Products(NamedTuple):
    """How the products of a round run: scratch and plan."""

    work: np.ndarray  # :func:`workspace`: kernel rows and the products
    plan: object  # :class:`fastsm._kernels.tri_rows.ProductPlan`: which factors are solved


@kernel(internal=True)
def project_out(z, V, h):
    """``z <- z - w (w . z) / (w . w)`` with ``w = W[:, h]`` (``V[h, h:]``, the leave-one-out
    projections :func:`fastsm.tgp.views.leave_one_out`): ``W = L^-1`` restricted to the model
    without training point ``h`` (exact leave-one-out).

    With ``A = K^-1 = W^T W`` the inverse of ``K`` without row and column ``h`` is
    ``A - a_h a_h^T / A_hh`` (entry ``h`` dropped), and ``a_h = W^T w``, ``A_hh = ||w||^2``; so
    ``K_{-h}^-1 k = W^T P W k`` and ``k^T K_{-h}^-1 k = ||P W k||^2`` with the projector ``P``
    onto the complement of ``w``, whatever ``k_h`` is (``P W e_h = P w = 0``).  ``w`` is zero above
    row ``h`` (only ``V[h, h:]`` is read).  O(N - h).

    ``k_h`` is the true kernel value (#55): then ``W k`` is the full model's product, of norm at most
    ``sqrt(k(z, z))``, and ``eta' = eta + (w . W k)^2 / ||w||^2`` adds positive terms.  With
    ``k_h = 0`` ``W k`` carried a component along ``w`` of norm up to ``k(z, z_h) ||w||`` (``||w||^2``
    = ``(K^-1)_hh``, up to ``1 / lambda``) that the projection cancelled: leave-one-out predictions on
    Toy 1 differed from refits by up to 3.8e-6 of the output spread (docs/accuracy.md).
    """
    n = V.shape[1]
    w = V[h]
    ww = 0.0
    wz = 0.0
    for j in range(h, n):
        ww += w[j] * w[j]
        wz += w[j] * z[j]
    c = wz / ww
    for j in range(h, n):
        z[j] -= c * w[j]


@kernel(inline=True)
def project_rows(A, V, held):
    """:func:`project_out` of every row ``A[r]`` for its left-out training point ``held[r]`` (``-1``: none).
    Serial: O(N) a row beside the products' O(N^2), and a parallel loop costs more to compile."""
    for r in range(A.shape[0]):
        if held[r] >= 0:
            project_out(A[r], V, held[r])


@kernel()
def workspace(m, n):
    """Scratch for :func:`evaluate_rows` of up to ``m`` rows: kernel rows and four product buffers."""
    return np.empty((5, m, n))


@kernel(inline=True)
def _ops(source, factor, fwd, target):
    """The ``(source, factor, fwd, target)`` table of one product of :func:`evaluate_rows`
    (:func:`~fastsm._kernels.tri_rows.run_products`); integers only, so one compiled signature."""
    out = np.empty((1, 4), dtype=np.int64)
    out[0, 0], out[0, 1], out[0, 2], out[0, 3] = source, factor, fwd, target
    return out


@kernel(inline=True)
def ops2(s0, f0, d0, t0, s1, f1, d1, t1):
    """The table of two independent products (:func:`_ops`)."""
    out = np.empty((2, 4), dtype=np.int64)
    out[0, 0], out[0, 1], out[0, 2], out[0, 3] = s0, f0, d0, t0
    out[1, 0], out[1, 1], out[1, 2], out[1, 3] = s1, f1, d1, t1
    return out


@kernel(internal=True)
def evaluate_rows(obj, pts, idx, Yt, out, prod, cubic):
    """Evaluate objective and gradient at ``Yt[r]`` for points ``idx[r]``.

    Row ``r`` of ``out`` (:class:`Evaluations`) belongs to trial point
    ``Yt[r]`` of test point ``idx[r]`` (whose fixed data is row ``idx[r]`` of
    ``pts``, :class:`Points`).  ``obj`` is the :class:`Objective`, with the
    method's two lower-triangular factors; ``prod`` (:class:`Products`)
    holds a :func:`workspace` of at least ``len(idx)`` rows and the plan.

    In this thread, stage by stage (module docstring): kernel rows; the products of each stage
    (:func:`~fastsm._kernels.tri_rows.run_products`, row loops whose every row gets the same operations
    whatever the other rows are); the O(N) per-row work between stages; then the O(N·dy) value and
    gradient.  A row's result therefore depends on nothing but its own data: not on the other rows of
    the call or their number, so threads can split the points (:func:`fastsm._threads.run_chunks`)
    without changing a bit.

    ``cubic`` is ``None``, or ``(K_X^-1, K_Y^-1)`` for the O(N^3) reference form
    (read where ``obj.method == SM_CUBIC``: SM_CUBIC's KLTGP start passes them too).  ``None`` compiles
    none of that form (:func:`~fastsm._kernels.cubic.cubic_rows`), so the fast path does not pay its
    compile time.

    ``pts.held[idx[r]]`` is the index of the training point left out of point ``idx[r]``'s model
    (exact leave-one-out), or ``-1`` (none).  Always an int64 array, never ``None``: one compiled
    version serves global and leave-one-out predictions (a scikit-learn user's first ``fit``
    runs both).
    Its kernel entry is zeroed and every forward product is projected onto the model of the
    ``N-1`` remaining points (:func:`project_out`) before the backward products.
    """
    m = idx.shape[0]
    work = prod.work
    plan = prod.plan
    for r in range(m):
        _kernel_row(obj, r, Yt, work)
    if obj.method == SM_CUBIC and cubic_rows(obj, pts, idx, Yt, work[K_ROW], cubic, out):
        return
    W1, W2 = obj.W1, obj.W2
    if obj.method == SM:
        run_products(work, W1, W2, ops2(K_ROW, 0, 1, Z1_ROW, K_ROW, 1, 1, Z2_ROW), m, plan)
    else:  # KL, IKL: z = W_1 k
        run_products(work, W1, W2, _ops(K_ROW, 0, 1, Z1_ROW), m, plan)
    for r in range(m):
        _middle(obj, pts, r, idx, work, out)
    if obj.method == KL:
        run_products(work, W1, W2, _ops(Z1_ROW, 0, 0, R1_ROW), m, plan)
    elif obj.method == SM:
        run_products(work, W1, W2, ops2(Z1_ROW, 0, 0, R1_ROW, Z2_ROW, 1, 0, R2_ROW), m, plan)
    else:
        run_products(work, W1, W2, _ops(Z1_ROW, 1, 0, Z2_ROW), m, plan)  # t = G^T z
        run_products(work, W1, W2, _ops(Z2_ROW, 1, 1, R1_ROW), m, plan)  # s = G t
        for r in range(m):
            _ikl_direction(obj, pts, r, idx, work, out)
        run_products(work, W1, W2, _ops(R1_ROW, 0, 0, R2_ROW), m, plan)  # W_Y^T q
    for r in range(m):
        _row_value_grad(obj, pts, r, idx, Yt, work, out)


@kernel(inline=True)
def _kernel_row(obj, r, Yt, work):
    """Row ``r``'s kernel row into ``work[K_ROW, r]``; the product buffers' rows are free until the
    products land: scratch of the exponential.  Leave-one-out keeps the left-out point's entry for the
    forward products (:func:`_middle` zeroes it after them, :func:`project_out`)."""
    call(kernel_row, Yt[r], obj.Zt, obj.gamma, work[K_ROW, r], work[R1_ROW, r], work[R2_ROW, r])


@kernel(internal=True)
def _floored(e, floor):
    if not e > floor:
        return floor, 1
    return e, 0


@kernel(inline=True)
def _middle(obj, pts, r, idx, work, out):
    """Between the forward and the backward products: leave-one-out projections, ``z_xy``, the etas."""
    p = idx[r]
    z = work[Z1_ROW, r]
    h = pts.held[p]
    if h >= 0:
        project_out(z, obj.V1, h)
    eta_y, hits = _floored(obj.kyy - dot_lanes(z, z), obj.floor)
    if h >= 0:
        work[K_ROW, r, h] = 0.0  # the value and gradient sums run over the N-1 remaining points
    eta_xy = np.nan
    if obj.method == SM:
        a = obj.alpha
        g = pts.F[p]
        zxy = work[Z2_ROW, r]
        for j in range(zxy.shape[0]):
            zxy[j] = (1.0 - a) * g[j] + a * zxy[j]
        if h >= 0:
            project_out(zxy, obj.V2, h)
        eta_xy, hit2 = _floored((1.0 - a) * obj.kxx + a * obj.kyy - dot_lanes(zxy, zxy), obj.floor)
        hits += hit2
    out.eta_y[r] = eta_y
    out.eta_xy[r] = eta_xy
    out.hits[r] = hits


@kernel(inline=True)
def _ikl_direction(obj, pts, r, idx, work, out):
    """IKLTGP between ``s = G t`` and the last product: ``q = -2 g + 2 P s - 2 (log(eta_y / eta_x) + 1) z``."""
    p = idx[r]
    s = work[R1_ROW, r]
    if pts.held[p] >= 0:
        project_out(s, obj.V1, pts.held[p])
    g = pts.F[p]
    z = work[Z1_ROW, r]
    c = -2.0 * (np.log(out.eta_y[r]) - np.log(pts.eta_x[p]) + 1.0)
    for j in range(s.shape[0]):
        s[j] = -2.0 * g[j] + 2.0 * s[j] + c * z[j]


@kernel(inline=True)
def _row_value_grad(obj, pts, r, idx, Yt, work, out):
    p = idx[r]
    k = work[K_ROW, r]
    y = Yt[r]
    grad = out.grad[r]
    eta_y = out.eta_y[r]
    eta_x = pts.eta_x[p]
    method, Zt, gamma = obj.method, obj.Zt, obj.gamma
    scratch = work[Z1_ROW, r]  # free once the backward products have read it (IKL reads it first, below)
    if method == KL:
        # [SM] Eq. 5; gradient -2 (u_x - eta_x/eta_y u_y)^T J (docs/math.md §3, Eq. 6 corrected)
        value = obj.kyy - 2.0 * dot_lanes(k, pts.F[p]) - eta_x * np.log(eta_y)
        combine_weights(-2.0, pts.F[p], 2.0 * eta_x / eta_y, work[R1_ROW, r], k, scratch)
        call(contract_lanes, y, Zt, scratch, gamma, grad)
    elif method == IKL:
        # [SM] Eq. 7/8: -2 k_x^T u_y + u_y^T K_X u_y + eta_y (log eta_y - log eta_x)
        value = -2.0 * dot_lanes(pts.F[p], work[Z1_ROW, r]) + dot_lanes(work[Z2_ROW, r], work[Z2_ROW, r]) + eta_y * (
            np.log(eta_y) - np.log(eta_x))
        q = work[R2_ROW, r]
        combine_weights(1.0, q, 0.0, q, k, scratch)
        call(contract_lanes, y, Zt, scratch, gamma, grad)
    else:
        # [SM] Eq. 16/17 in log space: s = a log eta_y - log eta_xy
        a, beta, eta_xy = obj.alpha, obj.beta, out.eta_xy[r]
        s = a * np.log(eta_y) - np.log(eta_xy)
        if beta == 1.0:
            value = -s / (2.0 * (1.0 - a))
            dlds = -1.0 / (2.0 * (1.0 - a))
        else:
            c = (1.0 - beta) / (2.0 * (1.0 - a))
            value = np.exp(c * s) / (beta - 1.0)
            dlds = c * value
        # ds/dy = (-2 a u_y / eta_y + 2 a u_xy / eta_xy)^T J
        combine_weights(dlds * (-2.0 * a / eta_y), work[R1_ROW, r], dlds * 2.0 * a / eta_xy, work[R2_ROW, r], k,
                        scratch)
        call(contract_lanes, y, Zt, scratch, gamma, grad)
    out.value[r] = value


@kernel()
def evaluate_batch(obj, pts, idx, Yt, out, prod, cubic):
    """:func:`evaluate_rows` called from Python (an internal kernel has no CPython wrapper: the one compiled
    for this entry is paid by the calls that use it, :func:`fastsm.tgp.objective` and
    :func:`fastsm.tgp.certainty`, not by every prediction)."""
    evaluate_rows(obj, pts, idx, Yt, out, prod, cubic)
