"""Warnings that point at the user's line: the first frame outside the fastsm package."""

from __future__ import annotations

import os
import sys
import warnings
from types import FrameType

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def warn(message: str, category: type[Warning]) -> None:
    """``warnings.warn`` with the stack level of the innermost caller outside fastsm.

    A fixed ``stacklevel`` is right for one call path only; public functions call
    each other (``TwinGPRegressor.predict`` → ``tgp.predict`` → ...), so the level
    is found by walking the stack.
    """
    frame: FrameType | None = sys._getframe(0)
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)
