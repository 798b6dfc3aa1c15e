"""Local models whose factors used to be inverted (IKLTGP, ``share="cluster"``): prediction times.

``random_structured`` data (N = 4000, dx = 4, dy = 2, 300 test points, lambda = 1e-3), 2 threads:
``share="cluster"`` (K = 300) for KLTGP, SMTGP and IKLTGP; per-point KNN (K = 200, ``"none"`` and
``"exact"``) and region models (K = 300, region size 400) for IKLTGP (and SMTGP for regions).  Each
entry is the minimum of two calls after a warm-up (JIT excluded; region models are cached after the
warm-up), with the first predicted value beside it.  Prints one JSON object, for A/B runs
(docs/scale.md, "Cholesky form for local models")::

    python benchmarks/local_forms.py
"""

from __future__ import annotations

import json

from fit_predict_times import best  # the sibling script's timer (benchmarks/ is the script's path)

from fastsm import datasets, tgp


def main() -> None:
    p = tgp.TGPParams(gamma_x="scale", gamma_y="scale", lambda_x=1e-3, lambda_y=1e-3, alpha=0.9, beta=1.5)
    X, Xt, Y, _ = datasets.random_structured(0, n_train=4000, n_test=300, dx=4, dy=2)
    out = {}
    for share, methods, k in (("cluster", ("kl", "sm", "ikl"), 300), ("none", ("ikl",), 200),
                              ("exact", ("ikl",), 200), ("region", ("ikl", "sm"), 300)):
        kw = {"region_size": 400} if share == "region" else {}
        model = tgp.fit_local(X, Y, p, n_neighbors=k, share=share, **kw)
        for method in methods:
            tgp.predict(model, Xt[:4], method=method)
            first = tgp.predict(model, Xt, method=method)
            out[f"{share} {method} K={k}"] = best(lambda: tgp.predict(model, Xt, method=method), 2)  # noqa: B023
            out[f"{share} {method} K={k} y0"] = float(first.y[0, 0])
    print(json.dumps(out))


if __name__ == "__main__":
    main()
