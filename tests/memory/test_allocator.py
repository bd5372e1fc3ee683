"""PyTorch's caching allocator simulated (estimator/memory/allocator.py), against its rules worked by hand.

The rules are those of pytorch/pytorch @ 001074d2 : c10/cuda/CUDACachingAllocator.cpp; MiB = 2^20 bytes. Each
expected value is derived in the test's docstring from the constants there (512 B blocks, 1 MiB small requests,
2 MiB small segments, 20 MiB segments for 1-10 MiB requests, larger requests rounded up to 2 MiB).
"""

from __future__ import annotations

import pytest

from estimator.config.errors import ConfigError
from estimator.memory.allocator import (AllocatorConfig, CachingAllocator, OutOfMemory, parse_alloc_conf,
                                        round_size)

MIB = 2 ** 20


@pytest.mark.parametrize("request_bytes, rounded", [
    (1, 512), (512, 512), (513, 1024),
    (1_000_000, 1_000_448),          # ceil(1e6 / 512) = 1954 blocks of 512
    (12 * MIB + 1, 12 * MIB + 512),
])
def test_requests_round_up_to_512_bytes(request_bytes, rounded):
    assert round_size(request_bytes) == rounded


def test_power_of_two_divisions():
    """4 divisions: 3 MiB + 1 lies between 2 MiB and 4 MiB, in steps of 512 KiB: 2 MiB + 3 x 512 KiB = 3,670,016.
    A request not above 512 x 4 = 2,048 B keeps the plain 512 B rounding: 1,200 -> 1,536."""
    cfg = parse_alloc_conf("roundup_power2_divisions:4")
    assert round_size(3 * MIB + 1, cfg) == 3_670_016
    assert round_size(4 * MIB, cfg) == 4 * MIB            # a power of two stays
    assert round_size(1200, cfg) == 1536


@pytest.mark.parametrize("request_bytes, segment", [
    (1000, 2 * MIB),                 # small request: a 2 MiB segment
    (MIB, 2 * MIB),                  # 1 MiB is still small
    (MIB + 1, 20 * MIB),             # 1-10 MiB: a 20 MiB segment
    (10 * MIB - 512, 20 * MIB),
    (10 * MIB - 1, 10 * MIB),        # rounds up to 10 MiB first
    (10 * MIB, 10 * MIB),            # 10 MiB and more: rounded up to 2 MiB
    (31 * MIB, 32 * MIB),
])
def test_a_new_segment_has_the_size_pytorch_gives_it(request_bytes, segment):
    a = CachingAllocator()
    a.malloc(request_bytes)
    assert a.reserved == segment and a.segments == 1


def test_small_requests_share_a_2_mib_segment():
    """100 x 10,240 B = 1,024,000 B fit one 2 MiB segment (204 would)."""
    a = CachingAllocator()
    for _ in range(100):
        a.malloc(10_240)
    assert (a.reserved, a.allocated, a.segments) == (2 * MIB, 1_024_000, 1)


def test_a_freed_block_is_reused_and_split_blocks_merge_back():
    """2 MiB takes a 20 MiB segment, split into 2 + 18; 3 MiB comes from the 18 (3 + 15); both freed merge back into
    20 MiB, which then holds 19 MiB without a new segment, whole: the 1 MiB left is not more than 1 MiB, so it is
    not split off, and 20 MiB count as allocated."""
    a = CachingAllocator()
    x, y = a.malloc(2 * MIB), a.malloc(3 * MIB)
    assert (a.reserved, a.allocated) == (20 * MIB, 5 * MIB)
    a.free(x)
    a.free(y)
    assert a.largest_free_block() == 20 * MIB
    a.malloc(19 * MIB)
    assert (a.reserved, a.segments, a.allocated) == (20 * MIB, 1, 20 * MIB)


def test_fragmentation_a_freed_block_too_small_for_the_next_request():
    """12 MiB and 12 MiB take two 12 MiB segments; the first is freed; 14 MiB does not fit it: a third segment.
    Reserved 12 + 12 + 14 = 38 MiB for 26 MiB allocated."""
    a = CachingAllocator()
    first = a.malloc(12 * MIB)
    a.malloc(12 * MIB)
    a.free(first)
    a.malloc(14 * MIB)
    assert (a.reserved, a.allocated, a.peak_reserved) == (38 * MIB, 26 * MIB, 38 * MIB)


def test_a_large_block_is_not_split_for_a_remainder_of_1_mib_or_less():
    """A cached 12 MiB block serves 11.5 MiB whole (0.5 MiB left is not worth a block): 12 MiB counts as allocated."""
    a = CachingAllocator()
    a.free(a.malloc(12 * MIB))
    a.malloc(11 * MIB + MIB // 2)
    assert (a.allocated, a.reserved) == (12 * MIB, 12 * MIB)


def test_max_split_size():
    """With max_split_size_mb:100 a cached 200 MiB block does not serve 50 MiB (a new 50 MiB segment), but serves
    190 MiB whole (200 < 190 + 20), which then counts 200 MiB as allocated."""
    a = CachingAllocator(parse_alloc_conf("max_split_size_mb:100"))
    a.free(a.malloc(200 * MIB))
    h = a.malloc(50 * MIB)
    assert a.reserved == 250 * MIB
    a.free(h)
    a.malloc(190 * MIB)
    assert (a.reserved, a.allocated) == (250 * MIB, 200 * MIB)


def test_at_capacity_the_cache_is_given_back_then_out_of_memory():
    """Capacity 50 MiB: a freed 30 MiB segment stays cached; 40 MiB would make 70 MiB, so the allocator frees the
    cache (one retry) and takes 40 MiB; 20 MiB more would make 60 MiB with nothing cached: out of memory."""
    a = CachingAllocator(capacity=50 * MIB)
    a.free(a.malloc(30 * MIB))
    a.malloc(40 * MIB)
    assert (a.reserved, a.alloc_retries, a.peak_reserved) == (40 * MIB, 1, 40 * MIB)
    with pytest.raises(OutOfMemory):
        a.malloc(20 * MIB)


def test_expandable_segments_grow_in_20_mib_pages():
    """Expandable: 30 MiB maps two 20 MiB pages (40 MiB reserved); 5 MiB more fits the mapped remainder; with the
    30 MiB block freed, 31 MiB does not fit it and goes after the 5 MiB block, at 35 MiB: up to 66 MiB, four pages,
    80 MiB reserved (the plain allocator would hold 30 + 20 + 32 = 82 MiB). empty_cache then unmaps the page that
    lies wholly in the freed 30 MiB (page 0, bytes 0-20 MiB): 60 MiB."""
    a = CachingAllocator(parse_alloc_conf("expandable_segments:True"))
    first = a.malloc(30 * MIB)
    assert a.reserved == 40 * MIB
    a.malloc(5 * MIB)
    assert a.reserved == 40 * MIB
    a.free(first)
    a.malloc(31 * MIB)
    assert (a.reserved, a.allocated) == (80 * MIB, 36 * MIB)
    a.empty_cache()
    assert a.reserved == 60 * MIB


def test_expandable_segments_split_any_block():
    """Expandable: a freed 30 MiB block serves 29.5 MiB and keeps 0.5 MiB as a block (plain: kept whole)."""
    a = CachingAllocator(parse_alloc_conf("expandable_segments:True"))
    h = a.malloc(30 * MIB)
    a.malloc(MIB * 10)
    a.free(h)
    a.malloc(29 * MIB + MIB // 2)
    assert a.allocated == 39 * MIB + MIB // 2


def test_parse_alloc_conf():
    cfg = parse_alloc_conf("expandable_segments:True,max_split_size_mb:512,garbage_collection_threshold:0.6")
    assert cfg == AllocatorConfig(expandable_segments=True, max_split_size=512 * MIB, garbage_collection_threshold=0.6)
    div = parse_alloc_conf("roundup_power2_divisions:[256:1,512:2,1024:4,>:8]").roundup_power2_divisions
    # intervals from 1 MiB: 1..256 MiB (indices 0-8) -> 1, 512 MiB (9) -> 2, 1 GiB (10) -> 4, the rest -> 8
    assert div == (1,) * 9 + (2, 4) + (8,) * 5
    assert parse_alloc_conf("") == parse_alloc_conf(None) == AllocatorConfig()


@pytest.mark.parametrize("text, words", [
    ("max_split_size_mb:10", "must be > 20"),
    ("expandable_segments:yes", "True or False"),
    ("foo:1", "unknown key 'foo'"),
    ("roundup_power2_divisions:3", "power of two"),
    ("garbage_collection_threshold:1.5", "between 0.0 and 1.0"),
    ("backend:cudaMallocAsync", "not modelled"),
    ("expandable_segments", "key:value"),
])
def test_bad_settings_are_named(text, words):
    with pytest.raises(ConfigError) as exc:
        parse_alloc_conf(text)
    assert words in str(exc.value) and "pytorch_cuda_alloc_conf" in str(exc.value)
