"""The GPU engine on the CPU (``fastsm.cuda.predict(..., backend="numpy")``) against the Numba engine: the largest
difference between converged predictions (in units of the output spread) and the share of equal converged flags,
per problem, method, factor form and optimiser, global models and a KNN-local one; then chunks of 7 points
against one chunk, and the two engines' times on one SMTGP job (docs/gpu.md).

Run: ``python benchmarks/gpu_agreement.py`` (a few minutes on 2 cores); under each OpenBLAS kernel family with
``OPENBLAS_CORETYPE=Nehalem`` (``SandyBridge``, ``Haswell``, ``SkylakeX``).
"""

from __future__ import annotations

import time
import warnings

import numpy as np

from fastsm import cuda, datasets, tgp
from fastsm.tgp.views import inverse_form


def problems():
    yield "toy1", datasets.toy1(0, n_train=300, n_test=300)
    yield "toy2", datasets.toy2(0, n_train=300, n_test=300)
    yield "rs16", datasets.random_structured(2, n_train=400, n_test=200, dy=16)
    yield "man8", datasets.smooth_manifold(3, n_train=500, n_test=200, dy=8)
    yield "man24l5", datasets.smooth_manifold(4, n_train=500, n_test=200, dy=24, latent=5)
    yield "man40", datasets.smooth_manifold(5, n_train=500, n_test=150, dy=40)


def main() -> None:
    warnings.simplefilter("ignore", RuntimeWarning)
    worst = {"bfgs": 0.0, "gd": 0.0}
    flags = {"bfgs": 1.0, "gd": 1.0}
    for name, (Xtr, Xte, Ytr, _) in problems():
        model = tgp.fit(Xtr, Ytr)
        for form, m in (("cholesky", model), ("inverse", inverse_form(model))):
            for method in ("kl", "ikl", "sm"):
                for opt in ("bfgs", "gd") if form == "cholesky" else ("bfgs",):
                    kw = {"optimizer": opt, "max_iter": 100} if opt == "gd" else {}
                    a = tgp.predict(m, Xte, method=method, **kw)
                    b = cuda.predict(m, Xte, method=method, backend="numpy", **kw)
                    both = a.converged & b.converged
                    err = float(np.abs(a.y - b.y)[both].max() / m.y_spread) if both.any() else 0.0
                    same = float(np.mean(a.converged == b.converged))
                    worst[opt] = max(worst[opt], err)
                    flags[opt] = min(flags[opt], same)
                    print(f"{name} {form} {method} {opt}: converged {a.converged.mean():.3f} (Numba) "
                          f"{b.converged.mean():.3f} (GPU engine), same flag {same:.3f}, largest difference {err:.2e}, "
                          f"evaluations a point {a.n_eval.mean():.1f} / {b.n_eval.mean():.1f}", flush=True)
    X, Xt, Y, _ = datasets.smooth_manifold(0, n_train=5000, n_test=300, dx=12, dy=10, latent=4)
    spread = float(np.sqrt(Y.var(axis=0).sum()))
    local = tgp.fit_local(X, Y, tgp.TGPParams(gamma_x=0.5, gamma_y=4.0, lambda_x=1e-3, lambda_y=1e-3), n_neighbors=100)
    for method in ("kl", "sm"):
        a = tgp.predict(local, Xt, method=method)
        b = cuda.predict(local, Xt, method=method, backend="numpy")
        both = a.converged & b.converged
        err = float(np.abs(a.y - b.y)[both].max() / spread)
        same = float(np.mean(a.converged == b.converged))
        worst["bfgs"] = max(worst["bfgs"], err)
        flags["bfgs"] = min(flags["bfgs"], same)
        print(f"KNN-local (N = 5000, K = 100, dx 12, dy 10) {method} bfgs: converged {a.converged.mean():.3f} (Numba) "
              f"{b.converged.mean():.3f} (GPU engine), same flag {same:.3f}, largest difference {err:.2e} of the whole "
              f"set's spread, evaluations a point {a.n_eval.mean():.1f} / {b.n_eval.mean():.1f}", flush=True)
    for opt in ("bfgs", "gd"):
        print(f"{opt}: largest difference {worst[opt]:.2e} of the spread, same converged flag >= {flags[opt]:.3f}")
    X, Xt, Y, _ = datasets.smooth_manifold(0, n_train=1000, n_test=512, dx=10, dy=16)
    m = tgp.fit(X, Y, methods=("kl", "sm"))
    one = cuda.predict(m, Xt[:200], backend="numpy")
    sevens = cuda.predict(m, Xt[:200], backend="numpy", chunk_size=7)
    print(f"chunks of 7 against one chunk: bitwise {np.array_equal(one.y, sevens.y)}, largest difference "
          f"{np.abs(one.y - sevens.y).max() / m.y_spread:.2e} of the spread")
    tgp.predict(m, Xt[:8])
    cuda.predict(m, Xt[:8], backend="numpy")
    for _ in range(2):
        t0 = time.perf_counter()
        tgp.predict(m, Xt)
        t1 = time.perf_counter()
        cuda.predict(m, Xt, backend="numpy")
        t2 = time.perf_counter()
        print(f"SMTGP N = 1000, B = 512, dy = 16: Numba engine {t1 - t0:.2f} s, GPU engine on NumPy {t2 - t1:.2f} s")


if __name__ == "__main__":
    main()
