"""GPU catalog (capacities as the driver reports them) and per-stage fit verdicts."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from estimator import ConfigError
from estimator.formats.gpus import GPUS, fit, get_gpu

MIB, GIB = 2 ** 20, 2 ** 30


def test_catalog_capacities_are_driver_readings():
    """nvidia-smi memory.total (MiB) of each product, as public nvidia-smi logs print it; rocm-smi bytes for the
    MI300X."""
    expected_mib = {"A100-40GB": 40960, "A100-80GB": 81920, "H100-80GB": 81559, "H100-94GB": 95830,
                    "H200-141GB": 143771, "B200-180GB": 183359, "GB200": 189471, "L40S-48GB": 46068}
    for name, mib in expected_mib.items():
        assert GPUS[name].memory_bytes == mib * MIB and GPUS[name].exact
        assert f"{mib} MiB" in GPUS[name].source
    assert GPUS["MI300X-192GB"].memory_bytes == 205_822_885_888
    assert not GPUS["MI325X-256GB"].exact and "specification" in GPUS["MI325X-256GB"].source
    assert all(g.source for g in GPUS.values())


def test_added_gpus_issue_29():
    """H800, H20, GH200 and B300 from public nvidia-smi outputs (memory.total: 81559, 97871, 97871 and 275040 MiB);
    MI355X from AMD's datasheet (288 GB HBM3E, taken as 288 GiB like the MI325X, not exact). Each reading is below
    its datasheet capacity ("80 GB" HBM3 ... "288 GB" HBM3e, taken as GiB) by the driver's reserved regions: at
    most 7 % (B300: 275040 MiB = 268.6 GiB of 288)."""
    readings = {"H800-80GB": (81559, 80), "H20-96GB": (97871, 96), "GH200-96GB": (97871, 96),
                "B300-288GB": (275040, 288)}
    for name, (mib, datasheet_gb) in readings.items():
        g = GPUS[name]
        assert g.memory_bytes == mib * MIB and g.exact
        assert f"{mib} MiB" in g.source and f"{datasheet_gb} GB" in g.source and "datasheet" in g.source
        assert 0.93 * datasheet_gb * GIB <= g.memory_bytes <= datasheet_gb * GIB
    mi355 = GPUS["MI355X-288GB"]
    assert mi355.memory_bytes == 288 * GIB and not mi355.exact and "288 GB" in mi355.source
    for alias, name in (("H800", "H800-80GB"), ("h20", "H20-96GB"), ("NVIDIA GH200 480GB", "GH200-96GB"),
                        ("B300", "B300-288GB"), ("NVIDIA B300 SXM6 AC", "B300-288GB"), ("MI355X", "MI355X-288GB")):
        assert get_gpu(alias) is GPUS[name]


def test_names_are_forgiving_but_never_ambiguous():
    assert get_gpu("h100-80gb") is get_gpu("H100 80GB") is get_gpu("H100") is GPUS["H100-80GB"]
    assert get_gpu("NVIDIA H200") is GPUS["H200-141GB"] and get_gpu("mi300x") is GPUS["MI300X-192GB"]
    with pytest.raises(ConfigError, match="ambiguous.*A100-40GB or A100-80GB"):
        get_gpu("A100")
    with pytest.raises(ConfigError, match="unknown GPU 'TPUv5'.*H100-80GB"):
        get_gpu("TPUv5")


def _estimate(*device_bytes, reserve=0):
    """Stages whose device figure is allocated + reserve (the allocator cache) + nothing else."""
    return SimpleNamespace(stages=[SimpleNamespace(stage=i, device_bytes=b, reserved_bytes=b,
                                                   allocated_bytes=b - reserve) for i, b in enumerate(device_bytes)])


def test_the_one_rule_by_hand():
    """Capacity C = 100 GiB, band b = 10 %, nothing kept free: upper bound U = P x 1.1.
    P = 90 GiB: U = 99 <= 100, fits. P = 95: U = 104.5 > 100 but P <= 100, fits within the error band ('tight').
    P = 101: the point itself is over, does not fit. (Was: 'tight' meant "fits without the allocator's reserve";
    that reserve is part of the point now, and the measured band covers what it misses.)"""
    v = fit(_estimate(90 * GIB, 95 * GIB, 101 * GIB), 100 * GIB, band=0.10)
    assert [x.verdict for x in v] == ["fits", "tight", "no"]
    assert [x.upper_bound_bytes for x in v] == [int(99 * GIB), int(104.5 * GIB), int(111.1 * GIB)]
    assert v[1].to_dict()["verdict"] == "tight" and not v[1].fits


def test_keep_free_adds_to_both_sides_of_the_rule():
    """C = 100 GiB, b = 10 %, keep_free 5 % (K = 5 GiB). P = 90: U + K = 104 > 100, P + K = 95 <= 100: amber.
    P = 96: P + K = 101 > 100: does not fit. P = 80: U + K = 93: fits. headroom= is the old name of keep_free."""
    v = fit(_estimate(90 * GIB, 96 * GIB, 80 * GIB), 100 * GIB, 0.05, band=0.10)
    assert [x.verdict for x in v] == ["tight", "no", "fits"]
    assert v[0].keep_free_bytes == 5 * GIB
    assert [x.verdict for x in fit(_estimate(90 * GIB), 100 * GIB, headroom=0.05, band=0.10)] == ["tight"]


def test_the_band_defaults_to_the_configurations_class():
    """An estimate without a configuration is a dense model: the dense band of the stored table."""
    from estimator.formats.error_bands import band_for
    v = fit(_estimate(50 * GIB), 100 * GIB)
    assert v[0].band == band_for({}) and v[0].band.driver == "dense"


def test_fit_verdicts_by_hand():
    """80 GiB capacity, no band: a 60 GiB stage leaves 20 GiB (25 %); a 90 GiB stage is 10 GiB (12.5 %) short."""
    v = fit(_estimate(60 * GIB, 90 * GIB), 80 * GIB, band=0.0)
    assert [x.fits for x in v] == [True, False]
    assert (v[0].headroom_bytes, v[0].headroom_pct) == (20 * GIB, 25.0)
    assert (v[1].headroom_bytes, v[1].headroom_pct) == (-10 * GIB, -12.5)
    assert v[1].to_dict()["capacity_bytes"] == 80 * GIB


def test_fit_with_required_headroom_and_a_gpu():
    """Keeping 30 % of 80 GiB (24 GiB) free fails the 60 GiB stage; a GPU object works as the capacity."""
    assert [x.fits for x in fit(_estimate(60 * GIB), 80 * GIB, headroom=0.3, band=0.0)] == [False]
    assert fit(_estimate(79 * GIB), GPUS["H100-80GB"], band=0.0)[0].fits          # 79.65 GiB
    with pytest.raises(ConfigError, match="positive"):
        fit(_estimate(1), 0)
    with pytest.raises(ConfigError, match="headroom"):
        fit(_estimate(1), GIB, headroom=1.5)
    with pytest.raises(ConfigError, match=r"keep_free.*\[0, 1\).*1\.5"):
        fit(_estimate(1), GIB, keep_free=1.5)
    with pytest.raises(ConfigError, match="band"):
        fit(_estimate(1), GIB, band=-0.1)


def test_every_gpu_carries_its_architecture_with_a_source():
    """Compute capabilities from NVIDIA's CUDA GPU table (A100 8.0, L40S 8.9, Hopper parts 9.0, B200/GB200 10.0,
    B300 10.3) and AMD's ROCm specifications (MI300X/MI325X gfx942, MI355X gfx950)."""
    from estimator.config.schema import GPU_ARCHS
    expected = {"A100-40GB": "sm_80", "A100-80GB": "sm_80", "L40S-48GB": "sm_89", "H100-80GB": "sm_90",
                "H100-94GB": "sm_90", "H200-141GB": "sm_90", "H800-80GB": "sm_90", "H20-96GB": "sm_90",
                "GH200-96GB": "sm_90", "B200-180GB": "sm_100", "GB200": "sm_100", "B300-288GB": "sm_103",
                "MI300X-192GB": "gfx942", "MI325X-256GB": "gfx942", "MI355X-288GB": "gfx950"}
    assert {n: g.arch for n, g in GPUS.items()} == expected
    assert all(g.arch in GPU_ARCHS and g.arch_source for g in GPUS.values())
    assert "developer.nvidia.com/cuda-gpus" in GPUS["B200-180GB"].arch_source
    assert "rocm.docs.amd.com" in GPUS["MI300X-192GB"].arch_source


def test_with_gpu_arch_sets_the_named_gpus_architecture():
    """The one route from a GPU name to the estimate: training.gpu_arch, set on a copy; an explicit other
    architecture is an error naming the field, both values and what to do."""
    from estimator.formats.gpus import with_gpu_arch
    cfg = {"model": {"num_layers": 2}, "training": {"world_size": 8}}
    out = with_gpu_arch(cfg, "B200")
    assert out["training"] == {"world_size": 8, "gpu_arch": "sm_100"} and "gpu_arch" not in cfg["training"]
    assert with_gpu_arch({"model": {}}, GPUS["H100-80GB"])["training"] == {"gpu_arch": "sm_90"}
    assert with_gpu_arch(out, "GB200") == out
    with pytest.raises(ConfigError, match=r"training.gpu_arch.*'sm_100'.*H100-80GB, is sm_90.*leave training"):
        with_gpu_arch(out, "H100-80GB")
