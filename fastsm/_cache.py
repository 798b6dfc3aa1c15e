"""Numba's cache, kept sound: keyed on everything a kernel's machine code depends on, and healing.

**Kernels called by symbol.**  A kernel compiled with :func:`fastsm._kernels.shared.call` holds a
declaration of its callee's process-wide symbol (:func:`symbol`), not a copy of the callee.  Before such
machine code is loaded from Numba's cache, the callee must be compiled (or loaded) and its symbol
registered: the compile result carries a ``Load`` for each callee in its ``reload_init``, which Numba runs
before it loads the code.  A kernel that links (calls plainly) a kernel holding such a declaration holds
the declaration too, so it needs the same ``Load``.  Numba copies the ``reload_init`` of the libraries a
kernel links into the kernel's own, but a library loaded from the cache starts with an empty one
(``CPUCodeLibrary._unserialize``): a result loaded from the cache gets its ``reload_init`` back on its
library here, so every kernel that links it inherits its ``Load`` entries, whatever process compiled it
(#67: without them LLVM's linker aborted, or left every external relocation unapplied: SIGSEGV).  A
cached result whose code declares a symbol none of its ``Load`` entries registers is a miss; the check
reads the names in the object code before Numba hands it to LLVM, where a missing symbol would poison
every later link of the process.

**The key.**  Numba keys an entry on its kernel's bytecode and checks the stamp of the kernel's own file
only: a kernel that links another kernel keeps a copy of it, and an edit of the other file (a ``git
pull`` under an editable install) left the copy in use, with the old answers (#74).  :class:`KernelCache`
adds :func:`build_key`: a digest of every source file a kernel's code can come from
(:data:`KERNEL_SOURCES`) and the settings that change machine code (bounds checking, optimisation
level, NumPy's version).  An index holds the entries of one digest: saving under a new one drops the
others, so a cache does not grow with every pull.

**Healing.**  A cache is an optimisation, never a risk.  Each data file carries a digest of its payload
and of the entry it was written for: a truncated, zero-filled or flipped file, or one holding another
kernel's entry (two processes writing at once, files swapped), is a miss; so is an entry whose loading
raises for any reason (a callee that no longer fits).  The kernel is compiled again and the entry
replaced, with one :class:`~fastsm.exceptions.CacheWarning` naming a damaged file.  A save that fails
(no space, a file-size limit, permissions, a read-only file system) leaves the compiled kernel in use
in memory, with one warning per process naming the cache folder.

**One compile across processes.**  Processes that start on a cold cache together (the workers of a
cluster, a test run's processes, the compile helper of :mod:`fastsm._prefetch`) would each compile every
kernel.  :meth:`Kernel.compile` holds a file lock per kernel and signature (:func:`compile_lock`) while it
loads or compiles: a process that finds the lock held waits for the holder's save and loads its entry.  A
process holds locks only under Numba's compiler lock, so the locks one process holds form a chain of
callers, and kernels call each other without cycles: no two processes wait for each other.  A holder that
stops without releasing (a process paused in a debugger) is waited for :data:`COMPILE_WAIT` seconds at most;
a process that dies releases its locks.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import itertools
import os
import pickle
import re
import time
import warnings
from collections.abc import Iterator
from typing import Any

import numba
import numpy as np
from numba.core import sigutils
from numba.core.caching import CompileResultCacheImpl, FunctionCache, IndexDataCacheFile
from numba.core.compiler_lock import global_compiler_lock
from numba.core.errors import NumbaWarning
from numba.core.registry import CPUDispatcher

from fastsm.exceptions import CacheWarning

try:
    import fcntl
except ImportError:  # not on POSIX: no lock, each process compiles what it needs
    fcntl = None  # type: ignore[assignment]

#: Whether processes can lock a kernel's compile (:func:`compile_lock`): POSIX file locks.
LOCKS = fcntl is not None

#: Prefix of the symbols of kernels called by symbol.
SYMBOL_PREFIX = "fastsm."

_SYMBOL = re.compile(re.escape(SYMBOL_PREFIX.encode()) + rb"[A-Za-z_][A-Za-z0-9_]*\.[0-9a-f]{32}")

_PACKAGE = os.path.dirname(os.path.abspath(__file__))

#: The package's files (relative to it; a folder means its ``*.py``) that kernels are compiled from or
#: read at compile time: every kernel module, the constants they freeze, and this module (the symbols).
#: ``tests/test_cache.py`` checks that every kernel, and every module a kernel module imports from
#: fastsm, lies here.
KERNEL_SOURCES: tuple[str, ...] = ("_kernels", "config.py", "_lapack.py", "_cache.py")

#: Seconds a process waits for another to finish compiling a kernel before it compiles the kernel itself.
COMPILE_WAIT = 600.0

#: The lock files this process holds (:func:`compile_lock`): read and changed only under Numba's compiler lock.
_HELD: set[str] = set()

#: First bytes of a data file written by :class:`EntryFile`.
_MAGIC = b"fastsm-entry-1\n"
_DIGEST = 16


def symbol(module: str, name: str, argtypes: tuple) -> str:
    """The process-wide symbol of kernel ``module.name`` compiled for ``argtypes``: the same in every
    process (unlike Numba's own names, which number functions in the order a process compiles them)."""
    digest = hashlib.sha256(f"{module}.{name}{argtypes!r}".encode()).hexdigest()[:32]
    return f"{SYMBOL_PREFIX}{name}.{digest}"


def loaded_symbols(reload_init) -> set[str]:
    """The symbols the entries of a ``reload_init`` register (those with a ``symbol``)."""
    return {entry.symbol for entry in reload_init if hasattr(entry, "symbol")}


def declared_symbols(library) -> set[str]:
    """The callee symbols (:func:`symbol`) that a compiled library's code declares."""
    return {fn.name for fn in library._final_module.functions
            if fn.is_declaration and _SYMBOL.fullmatch(fn.name.encode())}


def kernel_source_files(package: str = _PACKAGE) -> list[str]:
    """The files of :data:`KERNEL_SOURCES`, sorted, as paths relative to ``package``."""
    files = []
    for entry in KERNEL_SOURCES:
        path = os.path.join(package, entry)
        if os.path.isdir(path):
            files += [os.path.join(entry, f) for f in os.listdir(path) if f.endswith(".py")]
        else:
            files.append(entry)
    return sorted(files)


@functools.cache
def sources_digest(package: str = _PACKAGE) -> str:
    """A digest of the kernel sources' names and contents, read once per process (as the kernels are
    imported: the first kernel's cache computes it)."""
    h = hashlib.blake2b(digest_size=_DIGEST)
    for name in kernel_source_files(package):
        with open(os.path.join(package, name), "rb") as f:
            h.update(name.encode() + b"\0" + f.read() + b"\0")
    return h.hexdigest()


def code_settings() -> tuple:
    """The settings of this process that change a kernel's machine code and that Numba's own key leaves out
    (it holds the target CPU and Numba's version)."""
    c: Any = numba.config  # its settings are not in numba's stubs
    return (c.BOUNDSCHECK, repr(c.OPT), c.LOOP_VECTORIZE, c.SLP_VECTORIZE, c.DEBUGINFO_DEFAULT, c.USING_SVML,
            c.EXTEND_VARIABLE_LIFETIMES, np.__version__)


def build_key() -> tuple:
    """What :class:`KernelCache` adds to Numba's key: ``(sources_digest(), code_settings())``."""
    return sources_digest(), code_settings()


class StaleEntry(RuntimeError):
    """A cached kernel was compiled against a callee that has changed since: the entry is not used."""


class DamagedEntry(RuntimeError):
    """A cache file cannot be read back as it was written."""


def pack_entry(tag: bytes, body: bytes) -> bytes:
    """A data file's bytes: ``_MAGIC``, the entry's ``tag`` (a digest of what it was written for), the digest of
    ``body``, then ``body`` (the pickled payload)."""
    return _MAGIC + tag + hashlib.blake2b(body, digest_size=_DIGEST).digest() + body


def unpack_entry(data: bytes, path: str) -> tuple[bytes, memoryview]:
    """``(tag, body)`` of :func:`pack_entry`'s bytes; :class:`DamagedEntry` naming ``path`` if they are not."""
    n, head = len(_MAGIC), len(_MAGIC) + 2 * _DIGEST
    if len(data) < head or data[:n] != _MAGIC:
        raise DamagedEntry(f"{path}: not a fastsm cache entry ({len(data)} bytes)")
    body = memoryview(data)[head:]
    if hashlib.blake2b(body, digest_size=_DIGEST).digest() != data[n + _DIGEST:head]:
        raise DamagedEntry(f"{path}: its contents do not match their digest ({len(data)} bytes)")
    return data[n:n + _DIGEST], body


def _generation(key: Any) -> Any:
    """The sources digest a key was made with (``None`` for a key without one: Numba's own)."""
    return key[3][0] if isinstance(key, tuple) and len(key) == 4 else None


class EntryFile(IndexDataCacheFile):
    """Numba's index and data files, each data file checked against its payload and entry.

    A data file is :func:`pack_entry`'s, tagged with a digest of the index file's name and the key.
    """

    def index(self, *, strict: bool) -> dict:
        """The index's entries; a damaged index raises :class:`DamagedEntry` if ``strict``, else reads empty
        (the next save writes it anew)."""
        try:
            return self._load_index()
        except Exception as err:
            if strict:
                raise DamagedEntry(f"{self._index_path}: {err!r}") from err
            return {}

    def _tag(self, key: Any) -> bytes:
        return hashlib.blake2b(f"{self._index_name}{key!r}".encode(), digest_size=_DIGEST).digest()

    def entry_path(self, key: Any) -> str | None:
        """The data file the index names for ``key``, or ``None``."""
        name = self.index(strict=True).get(key)
        return None if name is None else self._data_path(name)

    def read(self, path: str, key: Any) -> Any:
        """The payload in ``path`` if written for ``key`` (``None`` if for another entry, or removed since the
        index was read); :class:`DamagedEntry` if the file is not what was written."""
        try:
            with open(path, "rb") as f:
                tag, body = unpack_entry(f.read(), path)
        except FileNotFoundError:
            return None
        return pickle.loads(body) if tag == self._tag(key) else None

    def load(self, key: Any) -> Any:
        """Numba's ``load``, checked as :meth:`read` (:meth:`KernelCache.load_overload` reads in two steps to name
        the file in its warning; this keeps Numba's own entry point from reading unchecked)."""
        path = self.entry_path(key)
        return None if path is None else self.read(path, key)

    def save(self, key: Any, data: Any) -> None:
        overloads = self.index(strict=False)
        name = overloads.get(key)
        if name is None:
            overloads = {k: v for k, v in overloads.items() if _generation(k) == _generation(key)}
            used = set(overloads.values())
            name = next(n for n in map(self._data_name, itertools.count(1)) if n not in used)
            overloads[key] = name
            self._save_index(overloads)
        with self._open_for_write(self._data_path(name)) as f:
            f.write(pack_entry(self._tag(key), self._dump(data)))


class KernelCacheImpl(CompileResultCacheImpl):
    """Numba's compile-result cache, with the symbol check and the ``reload_init`` of the module docstring."""

    def rebuild(self, target_context, payload):
        libdata, reload_init = payload[0], payload[7]
        _, kind, data = libdata
        if kind != "object":
            return None
        if not set(m.decode() for m in _SYMBOL.findall(data[0])) <= loaded_symbols(reload_init):
            return None
        try:
            cres = super().rebuild(target_context, payload)
        except StaleEntry:
            return None
        cres.library._reload_init.update(reload_init)
        return cres

    def check_cachable(self, cres):
        missing = declared_symbols(cres.library) - loaded_symbols(cres.library._reload_init)
        if missing:
            warnings.warn(f"{cres.fndesc.qualname} is not cached: no Load registers {sorted(missing)}",
                          NumbaWarning, stacklevel=2)
            return False
        return super().check_cachable(cres)


class KernelCache(FunctionCache):
    """:class:`KernelCacheImpl`'s cache in :class:`EntryFile` files, keyed also on :func:`build_key`; an entry
    that cannot be used is a miss, a save that fails a warning (module docstring)."""

    _impl_class = KernelCacheImpl

    def __init__(self, py_func) -> None:
        super().__init__(py_func)
        sources_digest()  # as the kernel's module is imported: the sources this process runs
        self._cache_file = EntryFile(self._cache_path, self._impl.filename_base,
                                     self._impl.locator.get_source_stamp())

    def _index_key(self, sig, codegen):
        return (*super()._index_key(sig, codegen), build_key())

    def load_overload(self, sig, target_context):
        if not self._enabled:
            return None
        target_context.refresh()
        path = None
        try:
            key = self._index_key(sig, target_context.codegen())
            path = self._cache_file.entry_path(key)
            payload = None if path is None else self._cache_file.read(path, key)
            return None if payload is None else self._impl.rebuild(target_context, payload)
        except Exception as err:
            what = str(err) if isinstance(err, DamagedEntry) else f"{path or 'index'}: {type(err).__name__}: {err}"
            warnings.warn(f"fastsm: a Numba cache entry of {self._py_func.__qualname__} could not be used, so it "
                          f"is compiled again and replaced: {what}", CacheWarning, stacklevel=2)
            return None

    def save_overload(self, sig, data):
        try:
            self._save_overload(sig, data)
        except Exception as err:
            reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
            save_failed(numba.config.CACHE_DIR or self._cache_path, f"{type(err).__name__}: {reason}")


@functools.cache
def save_failed(folder: str, reason: str) -> None:
    """Warn once per process, folder and reason that compiled kernels could not be saved to the cache."""
    warnings.warn(f"fastsm could not save compiled kernels to Numba's cache in {folder} ({reason}): they run from "
                  "memory in this process and are compiled again in the next. Free space there, or set "
                  "NUMBA_CACHE_DIR to a writable folder with space.", CacheWarning, stacklevel=3)


def _open_lock(path: str) -> int | None:
    """A descriptor of the lock file ``path`` (created if missing), or ``None`` where no lock can be taken there (no
    ``fcntl``, a read-only folder)."""
    if fcntl is None:
        return None
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:
        return None


def _try_lock(fd: int) -> bool | None:
    """Take the lock of ``fd`` if free: ``True`` taken, ``False`` held by another open file, ``None`` on a file
    system without locks."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError:
        return None
    return True


@contextlib.contextmanager
def compile_lock(path: str, wait: float = COMPILE_WAIT) -> Iterator[bool]:
    """Hold the file lock ``path`` (created if missing), waiting at most ``wait`` seconds for another process to
    release it; yields whether it holds it.  Call only under Numba's compiler lock.  A lock this process
    already holds is not taken again (yields ``False``); where no lock can be taken (no ``fcntl``, a
    read-only folder) the body runs unlocked (module docstring, "One compile across processes")."""
    fd = None if path in _HELD else _open_lock(path)
    if fd is None:
        yield False
        return
    try:
        deadline = time.monotonic() + wait
        while (taken := _try_lock(fd)) is False and time.monotonic() <= deadline:
            time.sleep(0.01)
        held = bool(taken)
        if held:
            _HELD.add(path)
        try:
            yield held
        finally:
            _HELD.discard(path)
    finally:
        os.close(fd)  # releases the lock


def locked_elsewhere(path: str) -> bool:
    """Whether another process (or another open file of this one) holds the lock ``path`` of :func:`compile_lock`."""
    fd = None if path in _HELD else _open_lock(path)
    if fd is None:
        return False
    try:
        return _try_lock(fd) is False
    finally:
        os.close(fd)  # releases it if taken


class Kernel(CPUDispatcher):
    """Numba's CPU dispatcher with :class:`KernelCache` (every kernel of :func:`fastsm.config.kernel`), compiling
    each signature once across processes (module docstring)."""

    def enable_caching(self) -> None:
        self._cache = KernelCache(self.py_func)

    def lock_path(self, args: tuple) -> str | None:
        """The lock file of this kernel compiled for ``args`` (:func:`compile_lock`), or ``None`` uncached."""
        cache = self._cache
        if not isinstance(cache, KernelCache) or not cache._enabled:
            return None
        digest = hashlib.blake2b(repr(args).encode(), digest_size=_DIGEST).hexdigest()
        return os.path.join(cache._cache_path, f"{cache._impl.filename_base}.{digest}.lock")

    def cached(self, args: tuple) -> bool:
        """Whether Numba's cache holds an entry of this kernel for ``args`` (no cache, an unreadable index: no)."""
        cache = self._cache
        if not isinstance(cache, KernelCache) or not cache._enabled:
            return False
        try:
            codegen = self.targetctx.codegen()  # type: ignore[attr-defined]  # the CPU context's, not in the stubs
            return cache._cache_file.entry_path(cache._index_key(args, codegen)) is not None
        except Exception:  # an unreadable index: the compile replaces it
            return False

    def compile(self, sig):
        args, _ = sigutils.normalize_signature(sig)
        path = None if tuple(args) in self.overloads else self.lock_path(tuple(args))
        if path is None:
            return super().compile(sig)
        with global_compiler_lock, compile_lock(path):
            return super().compile(sig)


class InternalKernel(Kernel):
    """A kernel compiled without a CPython wrapper (``kernel(internal=True)``): only other kernels call
    it, and a call from Python raises instead of jumping to a wrapper that is not there."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"{self.py_func.__qualname__} is an internal kernel (compiled without a CPython "
                        "wrapper): call it from a kernel")
