"""Progress reporting for long runs: off, a callback, or a line on stderr (tqdm when installed)."""

from __future__ import annotations

import sys
from collections.abc import Callable


class Progress:
    """``progress`` as the public functions accept it: ``False``, ``True`` or ``callback(done, total)``.

    ``True`` shows a tqdm bar when tqdm is installed, otherwise one
    self-overwriting line on stderr.  Use as a context manager; ``step()``
    after each unit of work.
    """

    def __init__(self, progress: bool | Callable[[int, int], None], total: int, desc: str) -> None:
        if not (isinstance(progress, bool) or callable(progress)):
            raise TypeError(f"progress must be True, False or a callable(done, total), got {type(progress).__name__}")
        self.total, self.done, self.desc = total, 0, desc
        self._callback = progress if callable(progress) and not isinstance(progress, bool) else None
        self._bar = None
        self._line = False
        if progress is True:
            try:
                from tqdm.auto import tqdm
            except ImportError:
                self._line = True
            else:
                self._bar = tqdm(total=total, desc=desc, leave=False)

    def __enter__(self) -> Progress:
        return self

    def step(self, n: int = 1) -> None:
        self.done += n
        if self._callback is not None:
            self._callback(self.done, self.total)
        elif self._bar is not None:
            self._bar.update(n)
        elif self._line:
            sys.stderr.write(f"\r{self.desc}: {self.done}/{self.total}")
            sys.stderr.flush()

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.close()
        elif self._line:
            sys.stderr.write("\n")
            sys.stderr.flush()
