"""glibc's heap kept by a resrepro process instead of handed back to the kernel after every free.

By default glibc serves an allocation above its mmap threshold (128 KB, raised as such blocks are
freed) with a fresh mapping and returns the top of its heap to the kernel beyond a trim threshold;
either way the next allocation of that memory touches new pages, each a page fault. A training
step allocates and frees its activations every step, in sizes that change with the batch (a
Transformer's lengths): on this project's CPU machine a mini Transformer run took 280,000 page
faults against 111,000 kept, and its loop 6-16% longer (benchmarks/heap_reuse.py). Kept, freed
memory is reused from the heap; a process's peak memory stays what it held at once. Only the
allocator changes, not a number.
"""

from __future__ import annotations

import ctypes

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_MAX = 32 << 20  # the largest glibc accepts on 64-bit: larger blocks are still mapped
TRIM_THRESHOLD = 1 << 30  # freed memory at the heap's top handed back only beyond 1 GiB


def keep_freed_memory() -> bool:
    """Set the thresholds for this process (and the children it forks); False where the C library
    has no mallopt (macOS) or refuses a value (musl's refuses every one)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError, TypeError):  # TypeError: Windows has no process-wide C library
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
