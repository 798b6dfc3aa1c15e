"""How precisely float64 pins down the TGP minimisers (docs/accuracy.md).

Predicts Toy 1 and Toy 2 twice with everything equal except ``batch_size``
(which changes only the GEMM blocking, i.e. the rounding) and prints the
largest difference of the converged predictions.

Run: ``python benchmarks/self_consistency.py``.
"""

import numpy as np

from fastsm import datasets, tgp


def main():
    print(f"{'data':5} {'lambda':>7} {'method':>6} {'max |y(batch 500) - y(batch 37)|':>34}")
    for name, make, a, b in (("toy1", datasets.toy1, 0.9, 1.5), ("toy2", datasets.toy2, 0.6, 0.99)):
        Xtr, Xte, Ytr, _ = make()
        for lam in (1e-4, 1e-2):
            m = tgp.fit(Xtr, Ytr, tgp.TGPParams(gamma_x=0.2, gamma_y=20.0, alpha=a, beta=b, lambda_x=lam,
                                                lambda_y=lam))  # Toy 1 widths, the defaults before "scale"
            Y0 = tgp.predict(m, Xte, method="kl").y
            for method in ("kl", "ikl", "sm"):
                kw = dict(method=method, max_iter=2000, tol=1e-12, init=Y0, trust_radius=0.02)
                d = np.abs(tgp.predict(m, Xte, batch_size=500, **kw).y - tgp.predict(m, Xte, batch_size=37, **kw).y)
                print(f"{name:5} {lam:7.0e} {method:>6} {d.max():34.2e}", flush=True)


if __name__ == "__main__":
    main()
