"""Peak memory of a broadcast divergence stack (hardening issue, item 15).

All pairs of 3 000 random Gaussians in d = 3 (9 million pairs) by
``divergences.sm`` over broadcast stacks; prints the growth of the peak
resident set and the time::

    python benchmarks/divergence_memory.py
"""

import resource
import time

import numpy as np

from fastsm import divergences


def main(n: int = 3000, d: int = 3) -> None:
    rng = np.random.default_rng(0)
    A = rng.standard_normal((n, d, d))
    S = A @ A.transpose(0, 2, 1) + np.eye(d)
    mu = rng.standard_normal((n, d))
    divergences.sm(mu[:2], S[:2], mu[:2], S[:2], 0.5, 1.5)  # compile / load the kernels
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    D = divergences.sm(mu[:, None], S[:, None], mu[None], S[None], 0.5, 1.5)
    seconds = time.perf_counter() - t0
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    print(f"{n} x {n} pairs, d = {d}: peak RSS +{grown:.0f} MB (output {D.nbytes / 2**20:.0f} MB), {seconds:.1f} s")


if __name__ == "__main__":
    main()
