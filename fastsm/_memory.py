"""Memory a call needs, against what the process may still use: a refusal before the work, not a crash in it.

``available_bytes`` is the least of what Linux reports: ``MemAvailable`` (``/proc/meminfo``), the
address-space limit (``RLIMIT_AS``, as batch schedulers set it) less the address space in use, and a
cgroup v2 limit less its usage.  Elsewhere nothing is known and nothing is refused.
"""

from __future__ import annotations

import os

#: Peak of ``tgp.fit`` in N x N float64 matrices (measured at N = 3000: 10.5 with IKLTGP, 7.5 KLTGP only)
FIT_MATRICES = 11
FIT_MATRICES_WITHOUT_IKL = 8
#: Peak of ``tgp.loo_predict`` beyond its model, in N x N float64 matrices (measured at N = 2000: 3.2)
LOO_MATRICES = 4


def _meminfo_kb(path: str, key: str) -> int | None:
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def available_bytes() -> int | None:
    """Bytes this process can still allocate, as far as the system says (``None``: unknown)."""
    found: list[int] = []
    kb = _meminfo_kb("/proc/meminfo", "MemAvailable")
    if kb is not None:
        found.append(kb * 1024)
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        if soft != resource.RLIM_INFINITY:
            used = _meminfo_kb("/proc/self/status", "VmSize")
            found.append(max(0, soft - (used or 0) * 1024))
    except (ImportError, OSError, ValueError):
        pass
    limit, usage = _read_int("/sys/fs/cgroup/memory.max"), _read_int("/sys/fs/cgroup/memory.current")
    if limit is not None and usage is not None:
        found.append(max(0, limit - usage))
    return min(found) if found else None


def check_memory(n_bytes: float, what: str, advice: str) -> None:
    """Raise ``MemoryError`` naming ``what``, the bytes it needs and ``advice`` if they are not available.

    ``FASTSM_NO_MEMORY_CHECK=1`` in the environment skips the check (swap, or memory the system
    reports too low).
    """
    if os.environ.get("FASTSM_NO_MEMORY_CHECK") == "1":
        return
    free = available_bytes()
    if free is not None and n_bytes > free:
        raise MemoryError(f"{what} needs about {n_bytes / 2**30:.1f} GiB, but this process can allocate "
                          f"{free / 2**30:.1f} GiB; {advice} (FASTSM_NO_MEMORY_CHECK=1 skips this check)")
