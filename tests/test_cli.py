"""fastsm.cli: the command line (``python -m fastsm ...``)."""

import re

from fastsm.cli import main


def test_compile_runs_every_kernel_family_with_a_progress_line_each(capsys):
    """#54 item 6: ``python -m fastsm compile`` warms every kernel family (a container image's build step)."""
    from fastsm.cli.compile import _steps

    names = [name for name, _ in _steps(1)]
    assert len(set(names)) == len(names) >= 10
    assert main(["compile", "--threads", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    lines = [ln for ln in out if ln.startswith("[")]
    assert len(lines) == len(names)
    for k, (line, name) in enumerate(zip(lines, names, strict=True), 1):
        assert re.fullmatch(rf"\[ ?{k}/{len(names)}\] {re.escape(name)} \.\.\. \d+\.\d s", line), line
    assert re.fullmatch(r"kernels ready in \d+\.\d s", out[-1])
