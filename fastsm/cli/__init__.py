"""Command line: ``python -m fastsm demo``, ``shift``, ``select``, ``digits``, ``bench``, ``compile`` and ``--version``.

One module per command in this subpackage; the library itself never imports it.
"""

from __future__ import annotations

import argparse


def main(argv: list[str] | None = None) -> int:
    from fastsm import __version__

    parser = argparse.ArgumentParser(prog="python -m fastsm", description=__doc__)
    parser.add_argument("--version", action="version", version=f"fastsm {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="KLTGP, IKLTGP and SMTGP on Toy 1 and Toy 2 ([SM] Table 2)")
    demo.add_argument("--threads", type=int, default=None)
    demo.add_argument("--seed", type=int, default=0)
    shift = sub.add_parser("shift", help="KLIEP weights by pg/fw/afw/pfw and IW-KLTGP/IW-SMTGP on the covariate-shift "
                                         "toy ([CS] §III-D)")
    shift.add_argument("--threads", type=int, default=None)
    shift.add_argument("--seed", type=int, default=0)
    select = sub.add_parser("select", help="[SM] §5.2 alpha/beta grid on Toy 1 and Toy 2 by exact leave-one-out "
                                           "(or k-fold) cross-validation")
    select.add_argument("--cv", default="loo", help='"loo" (default) or the number of folds')
    select.add_argument("--threads", type=int, default=None)
    select.add_argument("--seed", type=int, default=0)
    digits = sub.add_parser("digits", help="SMTGP/KLTGP/IKLTGP vs GPR, kernel ridge and W-KNN on scikit-learn's "
                                           "digits (central 2x2 and 4x4 pixels) and Linnerud data")
    digits.add_argument("--threads", type=int, default=None)
    digits.add_argument("--seed", type=int, default=0)
    digits.add_argument("--no-linnerud", action="store_true", help="the two digits tasks only")
    bench = sub.add_parser("bench", help="whole-prediction GFLOP/s against DGEMM, per-point SciPy baseline at "
                                         "equal quality, toy timing; --evaluation: one batched evaluation and "
                                         "the speed-up over fastsm.reference (fastsm/cli/bench.py)")
    bench.add_argument("--sizes", type=int, nargs="+", default=None,
                       help="training-set sizes (default 1000; 250 1000 with --evaluation)")
    bench.add_argument("--batches", nargs="+", default=["200", "1000", "N"],
                       help='test points per prediction ("N": as many as training points)')
    bench.add_argument("--evaluation", action="store_true", help="the single-evaluation table instead")
    bench.add_argument("--threads", type=int, default=None)
    warm = sub.add_parser("compile", help="compile (or load from Numba's cache) every kernel family once, with "
                                          "progress: for container images and new cluster workers")
    warm.add_argument("--threads", type=int, default=None)
    warm.add_argument("--jobs", type=int, default=None,
                      help="processes compiling side by side (default: one per core; 1: in this process)")
    args = parser.parse_args(argv)
    if args.command == "compile":
        from fastsm.cli.compile import main as compile_main

        if args.jobs is not None and args.jobs < 1:
            parser.error(f"--jobs must be >= 1, got {args.jobs}")
        return compile_main(threads=args.threads, jobs=args.jobs)
    if args.command == "demo":
        from fastsm.cli.demo import format_table, run

        print("fastsm demo: [SM] Table 2 on Toy 1 and Toy 2 (mean absolute error; paper's value beside ours)")
        print(format_table(run(threads=args.threads, seed=args.seed, log=print)))
        return 0
    if args.command == "shift":
        from fastsm.cli.shift import main as shift_main

        return shift_main(threads=args.threads, seed=args.seed)
    if args.command == "select":
        from fastsm.cli.select import main as select_main

        return select_main(cv=args.cv if args.cv == "loo" else int(args.cv), threads=args.threads, seed=args.seed)
    if args.command == "digits":
        from fastsm.cli.digits import main as digits_main

        return digits_main(threads=args.threads, seed=args.seed, linnerud=not args.no_linnerud)
    from fastsm.cli.bench import main as bench_main
    from fastsm.cli.bench import main_whole

    if args.evaluation:
        return bench_main(sizes=args.sizes or [250, 1000], threads=args.threads)
    return main_whole(sizes=args.sizes or [1000], batches=[b if b == "N" else int(b) for b in args.batches],
                      threads=args.threads)

