"""PyTorch's CUDA caching allocator, simulated: the memory ``torch.cuda.memory_reserved()`` holds after a sequence of
allocations and frees, and where the gap to ``memory_allocated()`` comes from.

Read from pytorch/pytorch @ 001074d2 : ``c10/cuda/CUDACachingAllocator.cpp`` (``DeviceCachingAllocator``:
``malloc``, ``free``, ``round_size``, ``get_pool``, ``get_allocation_size``, ``get_free_block``, ``should_split``,
``alloc_found_block``, ``free_block``, ``try_merge_blocks``, ``release_cached_blocks``, the expandable-segment
functions) and ``c10/core/AllocatorConfig.cpp`` (``PYTORCH_CUDA_ALLOC_CONF``). Sizes in bytes, MiB = 2^20:

- a request is rounded up to a multiple of 512 B (with ``roundup_power2_divisions`` d > 1 for its size interval and
  a request above 512 d, to the next of d equal steps between two powers of two); requests of at most 1 MiB come
  from the small pool, the others from the large pool, one pair of pools per stream (and per CUDA-graph private
  pool); a freed block is reused only on its own stream and pool;
- best fit: the smallest cached free block at least as large as the request, the lowest address among equals; with
  ``max_split_size_mb`` M a request below M never takes a block of M or more, and a request of M or more takes a
  block only if it is less than 20 MiB (``max_non_split_rounding_mb``) larger;
- no cached block fits: a new segment is ``cudaMalloc``'d: 2 MiB for a small request, 20 MiB for a request of 1 to
  10 MiB, else the request rounded up to 2 MiB;
- the block handed out is split when the rest is worth keeping: at least 512 B in the small pool (or with
  expandable segments), more than 1 MiB in the large pool (and only for a request below M); an unsplit block is
  counted whole in ``memory_allocated()``;
- a freed block merges with its free neighbours of the same segment;
- a new segment that would pass the GPU's capacity first makes the allocator give back what it caches
  (``release_cached_blocks``: every free segment that is not split; with expandable segments every fully free
  page), then retry; still too large is an out-of-memory error;
- ``expandable_segments:True`` (Megatron-Bridge's recipes set it): one segment per stream and pool that grows in
  pages of 2 MiB (small pool) or 20 MiB (large pool) at its end; any block splits down to 512 B.

Simplifications, stated: events of other streams (``record_stream``) are not modelled (a block is reusable at once);
with expandable segments a released page is remapped where the next block needs it, at its address, rather than at
the lowest free address; ``garbage_collection_threshold`` needs a memory fraction
(``torch.cuda.set_per_process_memory_fraction``, PyTorch's own condition) and is then applied as the source does:
before a new segment, when the reserved memory passes threshold x capacity, unsplit cached large segments at least as
old as the average are released.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from ..config.errors import ConfigError, Problem, show

__all__ = ["AllocatorConfig", "CachingAllocator", "OutOfMemory", "parse_alloc_conf", "round_size"]

MIB = 2 ** 20
MIN_BLOCK = 512                  # kMinBlockSize
SMALL_SIZE = MIB                 # kSmallSize: the largest small request
SMALL_BUFFER = 2 * MIB           # kSmallBuffer: a small-pool segment, and an expandable small-pool page
LARGE_BUFFER = 20 * MIB          # kLargeBuffer: a segment for requests of 1-10 MiB, and an expandable large page
MIN_LARGE_ALLOC = 10 * MIB       # kMinLargeAlloc
ROUND_LARGE = 2 * MIB            # kRoundLarge
_INTERVALS = 16                  # kRoundUpPowerOfTwoIntervals: 1 MiB ... 64 GiB
NO_LIMIT = 2 ** 64 - 1           # max_split_size when unset (SIZE_MAX)


@dataclass(frozen=True)
class AllocatorConfig:
    """The ``PYTORCH_CUDA_ALLOC_CONF`` settings that change how memory is reserved."""

    expandable_segments: bool = False
    max_split_size: int = NO_LIMIT                  # bytes (max_split_size_mb x MiB)
    max_non_split_rounding_size: int = LARGE_BUFFER  # bytes (max_non_split_rounding_mb x MiB)
    roundup_power2_divisions: tuple = (0,) * _INTERVALS  # per interval 1 MiB, 2 MiB, ..., 32 GiB and up
    garbage_collection_threshold: float = 0.0

    def divisions(self, size: int) -> int:
        index = max(size.bit_length() - 1 - 20, 0)
        return self.roundup_power2_divisions[min(index, _INTERVALS - 1)]


def _bad(value, message: str) -> ConfigError:
    return ConfigError(Problem("training.pytorch_cuda_alloc_conf", value, message))


def parse_alloc_conf(text: str | None) -> AllocatorConfig:
    """An :class:`AllocatorConfig` from a ``PYTORCH_CUDA_ALLOC_CONF`` value (``key:value`` pairs separated by commas,
    e.g. ``expandable_segments:True,max_split_size_mb:512``); keys without effect on reserved memory
    (``pinned_*``, ``release_lock_on_cudamalloc``, ``backend:native``) are accepted, unknown keys refused."""
    if text is None or not str(text).strip():
        return AllocatorConfig()
    if not isinstance(text, str):
        raise _bad(text, "must be a string of key:value pairs such as expandable_segments:True")
    out: dict = {}
    items, depth, cur = [], 0, ""
    for ch in text:                      # commas inside [...] belong to roundup_power2_divisions
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
        else:
            cur += ch
    items.append(cur)
    for item in items:
        key, sep, value = item.strip().partition(":")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            raise _bad(text, f"{show(item.strip())} is not a key:value pair")
        if key == "expandable_segments":
            if value not in ("True", "False"):
                raise _bad(text, f"expandable_segments takes True or False, got {show(value)}")
            out["expandable_segments"] = value == "True"
        elif key in ("max_split_size_mb", "max_non_split_rounding_mb"):
            try:
                mb = int(value)
            except ValueError:
                raise _bad(text, f"{key} takes a whole number of MiB, got {show(value)}") from None
            if key == "max_split_size_mb" and mb <= LARGE_BUFFER // MIB:
                raise _bad(text, f"max_split_size_mb must be > {LARGE_BUFFER // MIB} (PyTorch's rule), got {mb}")
            if mb < 0 or mb > 2 ** 40:
                raise _bad(text, f"{key} must be from 0 to 2^40 MiB, got {mb}")
            out["max_split_size" if key == "max_split_size_mb" else "max_non_split_rounding_size"] = mb * MIB
        elif key == "roundup_power2_divisions":
            out["roundup_power2_divisions"] = _divisions(text, value)
        elif key == "garbage_collection_threshold":
            try:
                x = float(value)
            except ValueError:
                x = -1.0
            if not 0.0 < x < 1.0:
                raise _bad(text, f"garbage_collection_threshold must be between 0.0 and 1.0 (exclusive), got {show(value)}")
            out["garbage_collection_threshold"] = x
        elif key in ("backend", "release_lock_on_cudamalloc", "pinned_use_cuda_host_register",
                     "pinned_num_register_threads", "pinned_use_background_threads", "pinned_reserve_segment_size_mb",
                     "expandable_segments_handle_type", "graph_capture_record_stream_reuse"):
            if key == "backend" and value != "native":
                raise _bad(text, f"backend {show(value)} is not modelled (cudaMallocAsync reserves memory its own way); "
                           "use backend:native")
        else:
            raise _bad(text, f"unknown key {show(key)}; known: expandable_segments, max_split_size_mb, "
                       "max_non_split_rounding_mb, roundup_power2_divisions, garbage_collection_threshold")
    return AllocatorConfig(**out)


def _divisions(text: str, value: str) -> tuple:
    """``4`` (every interval) or ``[256:1,512:2,>:8]`` (per size in MiB, a power of two; ``>`` the rest)."""
    def count(v: str) -> int:
        try:
            n = int(v)
        except ValueError:
            raise _bad(text, f"roundup_power2_divisions takes whole numbers, got {show(v)}") from None
        if n != 0 and (n < 1 or n & (n - 1) or n > 2 ** 16):
            raise _bad(text, f"roundup_power2_divisions must be 0 or a power of two up to 65,536, got {n}")
        return n
    if not value.startswith("["):
        return (count(value),) * _INTERVALS
    if not value.endswith("]"):
        raise _bad(text, f"roundup_power2_divisions: unclosed list {show(value)}")
    out = [0] * _INTERVALS
    last = 0
    for part in filter(None, (p.strip() for p in value[1:-1].split(","))):
        size, sep, n = part.partition(":")
        if not sep:
            raise _bad(text, f"roundup_power2_divisions: {show(part)} is not size:divisions")
        if size.strip() == ">":
            for i in range(last, _INTERVALS):
                out[i] = count(n)
            continue
        try:
            mb = int(size)
        except ValueError:
            raise _bad(text, f"roundup_power2_divisions: size {show(size)} is not a whole number of MiB") from None
        if mb < 1 or mb & (mb - 1):
            raise _bad(text, f"roundup_power2_divisions: size {mb} MiB is not a power of two")
        index = min(mb.bit_length() - 1, _INTERVALS - 1)
        for i in range(last, index + 1):
            out[i] = count(n)
        last = index + 1
    return tuple(out)


def round_size(size: int, config: AllocatorConfig = AllocatorConfig()) -> int:
    """The block size PyTorch hands out for a request of ``size`` bytes (``round_size``)."""
    if size < MIN_BLOCK:
        return MIN_BLOCK
    d = config.divisions(size)
    if d > 1 and size > MIN_BLOCK * d:
        if size & (size - 1) == 0:
            return size
        floor = 1 << (size.bit_length() - 1)
        step = floor >> (d.bit_length() - 1)
        if step == 0:
            return floor << 1
        low = size & ~(step - 1)
        return size if low == size else low + step
    return -(-size // MIN_BLOCK) * MIN_BLOCK


def _segment_size(size: int) -> int:
    """``get_allocation_size``: the segment cudaMalloc'd for a request no cached block holds."""
    if size <= SMALL_SIZE:
        return SMALL_BUFFER
    if size < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return -(-size // ROUND_LARGE) * ROUND_LARGE


class OutOfMemory(Exception):
    """The request does not fit the capacity even after the allocator gave back what it caches."""


class _Block:
    """A block of a segment: ``prev`` / ``next`` are its neighbours in address order (None at the segment's ends)."""

    __slots__ = ("addr", "size", "allocated", "prev", "next", "pool", "age")

    def __init__(self, addr: int, size: int, pool):
        self.addr, self.size, self.pool = addr, size, pool
        self.allocated, self.prev, self.next, self.age = False, None, None, 0


class _Pool:
    __slots__ = ("small", "free", "segment", "mapped", "calls")

    def __init__(self, small: bool):
        self.small = small
        self.free: list = []           # (size, addr, block) of cached free blocks, sorted
        self.segment = None            # expandable: the pool's one segment (its first block)
        self.mapped: set = set()       # expandable: indices of the mapped pages
        self.calls = 0                 # get_free_block calls (the garbage collector's clock)


class CachingAllocator:
    """One device's caching allocator. ``malloc`` returns a handle for ``free``; ``capacity`` (bytes, optional) is
    what cudaMalloc may take in all (the GPU's memory less what is outside PyTorch). The counters are those of
    ``torch.cuda.memory_stats``: ``allocated`` / ``reserved`` now, ``peak_allocated`` / ``peak_reserved``,
    ``segments``, ``alloc_retries``."""

    def __init__(self, config: AllocatorConfig | None = None, capacity: int | None = None,
                 memory_fraction: float | None = None):
        self.config = config or AllocatorConfig()
        self.capacity = capacity
        self.fraction_limit = int(capacity * memory_fraction) if capacity and memory_fraction else None
        self.allocated = self.reserved = self.peak_allocated = self.peak_reserved = 0
        self.segments = self.alloc_retries = 0
        self._pools: dict = {}
        self._live: dict = {}
        self._rounded: dict = {}     # request bytes -> rounded block bytes
        self._next_handle = 1
        self._next_addr = 0

    # ------------------------------------------------------------------ public

    def malloc(self, nbytes: int, stream: int = 0, private_pool: int | None = None) -> int:
        size = self._rounded.get(nbytes)
        if size is None:           # round_size depends on the size and the fixed config only: memoised
            size = self._rounded[nbytes] = round_size(nbytes, self.config)
        small = size <= SMALL_SIZE
        pool = self._pools.get((stream, private_pool, small)) or self._pool(stream, private_pool, small)
        block = self._find(pool, size)
        if block is None:
            block = self._new_block(pool, size)
        expandable = self.config.expandable_segments
        if block.size - size >= (MIN_BLOCK if small or expandable else SMALL_SIZE + 1) and \
                (small or expandable or size < self.config.max_split_size):
            rest = _Block(block.addr + size, block.size - size, pool)
            rest.prev, rest.next = block, block.next
            if block.next is not None:
                block.next.prev = rest
            block.next, block.size = rest, size
            self._cache(rest)
        block.allocated = True
        if expandable:
            self._map(block)
        self.allocated += block.size
        if self.allocated > self.peak_allocated:
            self.peak_allocated = self.allocated
        handle = self._next_handle
        self._next_handle += 1
        self._live[handle] = block
        return handle

    def free(self, handle: int) -> None:
        block = self._live.pop(handle)
        block.allocated = False
        self.allocated -= block.size
        after, before = block.next, block.prev
        if after is not None and not after.allocated:          # try_merge_blocks with the next block
            self._uncache(after)
            block.size += after.size
            block.next = after.next
            if after.next is not None:
                after.next.prev = block
        if before is not None and not before.allocated:        # and with the previous one
            self._uncache(before)
            block.addr, block.size, block.prev = before.addr, block.size + before.size, before.prev
            if before.prev is not None:
                before.prev.next = block
            if block.pool.segment is before:
                block.pool.segment = block
        self._cache(block)

    def empty_cache(self) -> None:
        """``torch.cuda.empty_cache()``: give back every cached segment that is not split (every free page)."""
        for pool in self._pools.values():
            self._release(pool)

    def largest_free_block(self) -> int:
        """The largest cached free block (bytes): what one more request can take without a new segment."""
        return max((pool.free[-1][0] for pool in self._pools.values() if pool.free), default=0)

    # ------------------------------------------------------------------ internals

    def _pool(self, stream: int, private_pool, small: bool) -> _Pool:
        key = (stream, private_pool, small)
        pool = self._pools.get(key)
        if pool is None:
            pool = self._pools[key] = _Pool(small)
        return pool

    def _cache(self, block: _Block) -> None:
        block.age = block.pool.calls
        bisect.insort(block.pool.free, (block.size, block.addr, id(block), block))

    def _uncache(self, block: _Block) -> None:
        free = block.pool.free
        i = bisect.bisect_left(free, (block.size, block.addr, id(block)))
        assert free[i][3] is block
        del free[i]

    def _find(self, pool: _Pool, size: int) -> _Block | None:
        """``get_free_block``: best fit, with the max_split_size rules."""
        pool.calls += 1
        i = bisect.bisect_left(pool.free, (size,))
        if i == len(pool.free):
            return None
        block = pool.free[i][3]
        if self.config.expandable_segments and block.next is None and i + 1 < len(pool.free):
            block = pool.free[i + 1][3]      # the segment's growing end counts as larger than any other block
        limit = self.config.max_split_size
        if size < limit <= block.size:
            return None
        if size >= limit and block.size >= size + self.config.max_non_split_rounding_size:
            return None
        self._uncache(block)
        return block

    def _new_block(self, pool: _Pool, size: int) -> _Block:
        if self.config.expandable_segments:
            return self._grow(pool, size)
        seg = _segment_size(size)
        if self.fraction_limit and self.config.garbage_collection_threshold and \
                self.reserved + seg > self.config.garbage_collection_threshold * self.fraction_limit:
            self._collect()
        limit = self.fraction_limit or self.capacity
        if limit is not None and self.reserved + seg > limit:
            self.alloc_retries += 1
            self.empty_cache()
            if self.reserved + seg > limit:
                raise OutOfMemory(f"{size:,} B requested with {self.allocated:,} B allocated and {self.reserved:,} B "
                                  f"reserved of {limit:,} B")
        block = _Block(self._next_addr, seg, pool)
        self._next_addr += seg + ROUND_LARGE          # segments never touch: no merging across them
        self.reserved += seg
        self.segments += 1
        self.peak_reserved = max(self.peak_reserved, self.reserved)
        return block

    def _grow(self, pool: _Pool, size: int) -> _Block:
        """Expandable segments: extend the pool's one segment at its end (its free tail block, if any, included)."""
        tail = pool.segment
        while tail is not None and tail.next is not None:
            tail = tail.next
        if tail is not None and not tail.allocated:
            self._uncache(tail)
            tail.size = size if tail.size < size else tail.size
            return tail
        if tail is None:
            block = _Block(self._next_addr, size, pool)
            self._next_addr += 2 ** 50               # room for the segment to grow
            pool.segment = block
            self.segments += 1
            return block
        block = _Block(tail.addr + tail.size, size, pool)
        block.prev, tail.next = tail, block
        return block

    def _page(self, pool: _Pool) -> int:
        return SMALL_BUFFER if pool.small else LARGE_BUFFER

    def _map(self, block: _Block) -> None:
        """Expandable segments: map the pages the block covers that are not mapped yet."""
        if not self.config.expandable_segments:
            return
        pool, page = block.pool, self._page(block.pool)
        first, last = (block.addr - pool.segment.addr) // page, (block.addr + block.size - 1 - pool.segment.addr) // page
        new = [p for p in range(first, last + 1) if p not in pool.mapped]
        if not new:
            return
        limit = self.fraction_limit or self.capacity
        if limit is not None and self.reserved + len(new) * page > limit:
            self.alloc_retries += 1
            self.empty_cache()
            if self.reserved + len(new) * page > limit:
                raise OutOfMemory(f"{block.size:,} B requested with {self.allocated:,} B allocated and "
                                  f"{self.reserved:,} B reserved of {limit:,} B")
        pool.mapped.update(new)
        self.reserved += len(new) * page
        self.peak_reserved = max(self.peak_reserved, self.reserved)

    def _release(self, pool: _Pool) -> None:
        if self.config.expandable_segments:
            if pool.segment is None:
                return
            page, base = self._page(pool), pool.segment.addr
            tail = pool.segment
            while tail.next is not None:
                tail = tail.next
            end = tail.addr + tail.size if tail.allocated else tail.addr
            spans = [(addr, addr + size) for size, addr, _, _ in pool.free if addr + size <= end]
            spans.append((end, base + page * (max(pool.mapped, default=-1) + 1)))   # mapped beyond the last block
            for lo, hi in spans:
                for p in range(-(-(lo - base) // page), (hi - base) // page):   # pages wholly inside [lo, hi)
                    if p in pool.mapped:                     # (a page shared with a live block stays mapped)
                        pool.mapped.discard(p)
                        self.reserved -= page
            return
        keep = []
        for entry in pool.free:
            block = entry[3]
            if block.prev is None and block.next is None:
                self.reserved -= block.size
                self.segments -= 1
            else:
                keep.append(entry)
        pool.free[:] = keep

    def _collect(self) -> None:
        """``garbage_collect_cached_blocks``: release unsplit cached large segments at least as old as the average."""
        for pool in self._pools.values():
            if pool.small:
                continue
            whole = [e for e in pool.free if e[3].prev is None and e[3].next is None]
            if not whole:
                continue
            ages = [pool.calls - e[3].age for e in whole]
            mean = sum(ages) / len(ages)
            gone = {id(e[3]) for e, age in zip(whole, ages) if age >= mean}
            for e in whole:
                if id(e[3]) in gone:
                    self.reserved -= e[3].size
                    self.segments -= 1
            pool.free[:] = [e for e in pool.free if id(e[3]) not in gone]
