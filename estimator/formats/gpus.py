"""GPU catalog and fit verdicts: does each pipeline stage's ``device_bytes`` fit a GPU?

Capacities are what the driver reports as the device's total memory, the figure a training process is
actually held to: ``nvidia-smi``'s ``memory.total`` (MiB = 2^20 bytes) for NVIDIA and ``rocm-smi
--showmeminfo vram`` for AMD. They are below the marketing sizes ("80GB" H100 -> 81,559 MiB = 79.6 GiB)
because the driver keeps ECC and firmware regions. Each entry names the output it was read from and the vendor
datasheet's capacity. Where no driver reading was found (MI325X, MI355X), the datasheet's "N GB" is taken as N GiB,
as the MI300X's "192 GB" reads 191.7 GiB in rocm-smi, and the entry is marked ``exact=False``.

:func:`fit` holds every stage's ``device_bytes`` (allocated + allocator reserve + CUDA context + communication
buffers, see :mod:`estimator.memory.assemble`) and its upper bound (the point plus the estimator's measured error
for that kind of configuration, :mod:`.error_bands`) against a capacity: the one rule every surface uses (fits,
fits within the error band, does not fit), with the one "keep free" setting (:data:`KEEP_FREE`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..config.derived import is_amd
from ..config.errors import ConfigError, Problem, show, wrong_type
from ..memory.report import Estimate
from .error_bands import Band, band_for

__all__ = ["ARCH_SOURCES", "GPU", "GPUS", "KEEP_FREE", "StageFit", "check_keep_free", "fit", "get_gpu", "usable_bytes",
           "with_gpu_arch"]

MIB = 2 ** 20
GIB = 2 ** 30
#: Largest capacity :func:`fit` accepts (1 PiB): far above any GPU, and safely a float.
MAX_CAPACITY_BYTES = 2 ** 50


#: Where each entry's architecture (``GPU.arch``, a ``training.gpu_arch`` name) is read.
ARCH_SOURCES = {
    "nvidia": "NVIDIA's CUDA GPU compute capability table (https://developer.nvidia.com/cuda-gpus): A100 8.0, "
              "L40S 8.9, H100/H200/H800/H20/GH200 9.0, B200/GB200 10.0, B300/GB300 10.3",
    "amd": "AMD's ROCm GPU specifications (https://rocm.docs.amd.com/en/latest/reference/gpu-arch-specs.html): "
           "MI300X and MI325X gfx942, MI355X gfx950",
}


@dataclass(frozen=True)
class GPU:
    """One accelerator: its catalog name, total memory in bytes as the driver reports it, and the source; its
    architecture (a ``training.gpu_arch`` name: compute capability sm_XY or AMD gfx target, :data:`ARCH_SOURCES`),
    which sets what Transformer Engine and PyTorch allocate on it."""

    name: str
    memory_bytes: int
    source: str
    exact: bool = True   # False: a specification figure, not a driver reading
    arch: str | None = None   # None: not known (the estimate then assumes Hopper, as with no GPU named)

    @property
    def arch_source(self) -> str | None:
        return None if self.arch is None else ARCH_SOURCES["amd" if is_amd(self.arch) else "nvidia"]

    @property
    def memory_gib(self) -> float:
        return self.memory_bytes / GIB


def _nv(name: str, mib: int, product: str, arch: str, datasheet: str = "") -> GPU:
    return GPU(name, mib * MIB, f"nvidia-smi memory.total of an '{product}': {mib} MiB (as public nvidia-smi "
                                "outputs print it)" + (f"; datasheet: {datasheet}" if datasheet else ""), arch=arch)


#: The catalog, by name. Names carry the marketing size so that the 40 and 80 GB A100 cannot be confused.
GPUS: dict[str, GPU] = {g.name: g for g in (
    _nv("A100-40GB", 40960, "NVIDIA A100-SXM4-40GB", "sm_80"),
    _nv("A100-80GB", 81920, "NVIDIA A100-SXM4-80GB", "sm_80"),
    _nv("H100-80GB", 81559, "NVIDIA H100 80GB HBM3", "sm_90"),
    _nv("H100-94GB", 95830, "NVIDIA H100 NVL", "sm_90"),
    _nv("H200-141GB", 143771, "NVIDIA H200", "sm_90"),
    _nv("B200-180GB", 183359, "NVIDIA B200", "sm_100"),
    _nv("GB200", 189471, "NVIDIA GB200", "sm_100"),
    _nv("L40S-48GB", 46068, "NVIDIA L40S", "sm_89"),
    _nv("H800-80GB", 81559, "NVIDIA H800", "sm_90", "80 GB HBM3 (NVIDIA H800 Tensor Core GPU datasheet, SXM5; the "
        "H100 SXM's memory, which reads the same 81559 MiB)"),
    _nv("H20-96GB", 97871, "NVIDIA H20", "sm_90", "96 GB HBM3 (NVIDIA HGX H20 specification)"),
    _nv("GH200-96GB", 97871, "NVIDIA GH200 480GB", "sm_90", "96 GB HBM3 GPU memory beside 480 GB of LPDDR5X CPU "
        "memory (NVIDIA GH200 Grace Hopper Superchip datasheet, "
        "https://www.nvidia.com/en-us/data-center/grace-hopper-superchip/); the 144 GB HBM3e version is another "
        "product"),
    _nv("B300-288GB", 275040, "NVIDIA B300 SXM6 AC", "sm_103", "288 GB HBM3e per GPU (NVIDIA HGX B300 / DGX B300 "
        "datasheet, https://www.nvidia.com/en-us/data-center/hgx/)"),
    GPU("MI300X-192GB", 205_822_885_888, "rocm-smi --showmeminfo vram of an AMD Instinct MI300X: VRAM Total "
        "Memory (B) 205822885888 (some virtualized instances report 206158430208 = 192 GiB)", arch="gfx942"),
    GPU("MI325X-256GB", 256 * GIB, "AMD specification: 256 GB HBM3E, taken as 256 GiB (the MI300X's '192 GB' "
        "reads 191.7 GiB in rocm-smi); no driver reading was found, so expect ~0.3 GiB less", exact=False,
        arch="gfx942"),
    GPU("MI355X-288GB", 288 * GIB, "AMD specification: 288 GB HBM3E (AMD Instinct MI355X datasheet, "
        "https://www.amd.com/en/products/accelerators/instinct/mi350/mi355x.html), taken as 288 GiB as for the "
        "MI325X; no driver reading was found, so expect ~0.3 GiB less", exact=False, arch="gfx950"),
)}

#: Other spellings users type; an ambiguous one ("A100") is refused with the choices.
_ALIASES = {
    "h100": "H100-80GB", "h100sxm": "H100-80GB", "h100sxm80gb": "H100-80GB", "h10080gbhbm3": "H100-80GB",
    "h100nvl": "H100-94GB", "h200": "H200-141GB", "h200sxm": "H200-141GB", "b200": "B200-180GB",
    "gb200nvl72": "GB200", "mi300x": "MI300X-192GB", "mi325x": "MI325X-256GB", "l40s": "L40S-48GB",
    "a100sxm440gb": "A100-40GB", "a100sxm480gb": "A100-80GB",
    "h800": "H800-80GB", "h800sxm": "H800-80GB", "h20": "H20-96GB", "gh200": "GH200-96GB", "gh200480gb": "GH200-96GB",
    "b300": "B300-288GB", "b300sxm6ac": "B300-288GB", "mi355x": "MI355X-288GB",
}
_AMBIGUOUS = {"a100": ("A100-40GB", "A100-80GB")}


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower().removeprefix("nvidia").removeprefix("amd"))


def get_gpu(name: str) -> GPU:
    """The catalog entry for ``name`` (case and punctuation are ignored: ``h100-80gb``, ``H100 80GB``)."""
    if not isinstance(name, str):
        raise ConfigError(Problem("gpu", show(name), f"expected a GPU name such as H100-80GB, got {show(name)}"))
    k = _key(name)
    for g in GPUS.values():
        if _key(g.name) == k:
            return g
    if k in _ALIASES:
        return GPUS[_ALIASES[k]]
    if k in _AMBIGUOUS:
        raise ConfigError(Problem("gpu", name, f"'{name}' is ambiguous: say {' or '.join(_AMBIGUOUS[k])}"))
    raise ConfigError(Problem("gpu", show(name), f"unknown GPU {show(name)}; known: {', '.join(GPUS)} (or give "
                              "the capacity with --gpu-memory GIB)"))


def with_gpu_arch(config: dict, gpu) -> dict:
    """``config`` (plain data, as written) for the GPU ``gpu`` (a :class:`GPU` or a catalog name): a copy with
    ``training.gpu_arch`` set to the GPU's architecture, so that the estimate counts what Transformer Engine and
    PyTorch allocate on that GPU. Every surface that names a GPU goes through it (the CLI's ``--gpu``, the
    calculator's GPU, the layout search). ``config`` unchanged (the same object) for a GPU of unknown architecture or
    a section that is not a mapping (the loader reports it). Raises :class:`~estimator.config.errors.ConfigError`
    naming ``training.gpu_arch`` when the configuration sets another architecture than the GPU's."""
    g = get_gpu(gpu) if isinstance(gpu, str) else gpu
    arch = getattr(g, "arch", None)
    tr = config.get("training", {}) if isinstance(config, dict) else None
    if arch is None or not isinstance(tr, dict):
        return config
    given = tr.get("gpu_arch")
    if given is not None and given != arch:
        raise ConfigError(Problem("training.gpu_arch", show(given), f"is {show(given)}, but the GPU named, {g.name}, "
                                  f"is {arch}: leave training.gpu_arch unset (the GPU sets it) or name a GPU of "
                                  f"that architecture"))
    return {**config, "training": {**tr, "gpu_arch": arch}}


#: The default "keep free" setting: the fraction of the GPU's memory the rule keeps free on top of the upper bound.
#: 0: the upper bound already carries the estimator's measured error (:mod:`.error_bands`).
KEEP_FREE = 0.0


def check_keep_free(value, field: str = "keep_free") -> float:
    """``value`` as a fraction in [0, 1), or a ConfigError naming ``field``, the value and the range."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise ConfigError(Problem(field, show(value), f"must be a fraction of the GPU memory in [0, 1), got "
                                  f"{show(value)} (0.05 keeps 5 % free)"))
    return float(value)


def usable_bytes(capacity: int, keep_free: float = KEEP_FREE, band: float = 0.0) -> int:
    """The largest point estimate (``device_bytes``) that *fits* under the one rule: ``floor(C x (1 - k) / (1 + b))``.

    ``capacity`` C in bytes, ``keep_free`` k and ``band`` b as fractions. The search, "Make it fit", the sweeps and
    the MoE routing headroom compare a point with this, so they agree with :func:`fit` at the cost of one division.
    """
    return int(capacity * (1.0 - keep_free) / (1.0 + band))


@dataclass(frozen=True)
class StageFit:
    """The verdict for one pipeline stage against one capacity, under the one rule (see :func:`fit`)."""

    stage: int
    device_bytes: int      # the point estimate
    capacity_bytes: int
    headroom_bytes: int    # capacity - device; negative when even the point does not fit
    headroom_pct: float    # headroom as a percentage of the capacity
    fits: bool             # the upper bound plus what is kept free fits
    tight: bool = False    # amber: the point (or at least it less the allocator reserve) fits, the upper bound does not
    upper_bound_bytes: int = 0   # device_bytes x (1 + band)
    keep_free_bytes: int = 0     # keep_free x capacity
    band: object = None          # the estimate's error band (an estimator.formats.error_bands.Band)
    phase: str = "steady step"   # the moment of the run whose peak this is (estimator/memory/phases.py)

    @property
    def verdict(self) -> str:
        """'fits', 'tight' (amber: fits within the error band) or 'no' (does not fit)."""
        return "fits" if self.fits else ("tight" if self.tight else "no")

    def to_dict(self) -> dict:
        return {"stage": self.stage, "device_bytes": self.device_bytes, "capacity_bytes": self.capacity_bytes,
                "headroom_bytes": self.headroom_bytes, "headroom_pct": self.headroom_pct, "fits": self.fits,
                "tight": self.tight, "verdict": self.verdict, "upper_bound_bytes": self.upper_bound_bytes,
                "keep_free_bytes": self.keep_free_bytes,
                "band": self.band.to_dict() if self.band is not None else None, "phase": self.phase}


_STAGE_FIELDS = ("stage", "device_bytes", "reserved_bytes", "allocated_bytes")


def fit(estimate, capacity_bytes, keep_free: float = KEEP_FREE, *, band=None,
        headroom: float | None = None) -> tuple[StageFit, ...]:
    """Per-stage verdicts of ``estimate`` (an :class:`~estimator.memory.report.Estimate`) against a GPU: the one rule.

    With capacity C, the point P (a stage's ``device_bytes``), its upper bound U = P x (1 + b) (b: the measured
    error band of the configuration's class, :func:`estimator.formats.error_bands.band_for`) and K = k x C kept
    free (k: ``keep_free``, default 0):

    - *fits* when U + K <= C;
    - *fits within the error band* (``tight``, amber) when F + K <= C < U + K, F = P less the caching allocator's
      reserve (``device_bytes - reserved_bytes + allocated_bytes``): the estimate, or at least what PyTorch
      allocates with the CUDA context and NCCL buffers, fits, the bound does not;
    P is the stage's worst moment among those the run goes through (the steady step, evaluation, checkpoint save and
    load, the phases of an RL step: estimator/memory/phases.py), named by ``StageFit.phase``. With a colocated RL
    rollout engine (``training.rl_rollout_gpu_memory_fraction`` f) the rollout moment is
    P = R + f x C, R the training side's resident bytes with the CUDA context and NCCL buffers, U = R x (1 + b) + f x C
    (the engine's share is fixed, not estimated), and F = P; the moment with the worse verdict sets the stage's.

    - *does not fit* when F + K > C: even what PyTorch allocates does not fit, and the run stops with an
      out-of-memory error. (The reserve is the part of the estimate measured runs vary most in, 1.008-1.27 x
      allocated: a published recipe can run where P alone is over, so P over the capacity is amber, not red.)

    ``capacity_bytes`` is a byte count or a :class:`GPU`. ``band``: a fraction or a Band; by default the band of
    the estimate's own configuration. ``headroom`` is the old name of ``keep_free``.

    Raises :class:`~estimator.config.errors.ConfigError` for a capacity, keep-free or band out of range and
    :class:`~estimator.config.errors.InputTypeError` (a ``TypeError``) when ``estimate`` is not an Estimate (or an
    object like it: ``stages``, each with integer ``stage``, ``device_bytes``, ``reserved_bytes`` and
    ``allocated_bytes``).
    """
    stages = getattr(estimate, "stages", None)
    if not isinstance(estimate, Estimate) and not (isinstance(stages, (list, tuple)) and all(
            all(type(getattr(s, k, None)) is int for k in _STAGE_FIELDS) for s in stages)):
        raise wrong_type("fit", "estimate", "an Estimate", estimate, "estimator.estimate(config) makes one")
    cap = capacity_bytes.memory_bytes if isinstance(capacity_bytes, GPU) else capacity_bytes
    if isinstance(cap, bool) or not isinstance(cap, int) or not 0 < cap <= MAX_CAPACITY_BYTES:
        raise ConfigError(Problem("gpu_memory", show(cap), "the GPU capacity must be a positive number of bytes, "
                                  f"at most {MAX_CAPACITY_BYTES:,} (1 PiB), got {show(cap)}"))
    k = check_keep_free(headroom, "headroom") if headroom is not None else check_keep_free(keep_free)
    if band is None:
        band = band_for(getattr(estimate, "config", None) or {})
    elif not isinstance(band, Band):
        if isinstance(band, bool) or not isinstance(band, (int, float)) or not 0.0 <= band < 1.0:
            raise ConfigError(Problem("band", show(band), f"must be a fraction in [0, 1) or a Band, got {show(band)}"))
        band = Band(float(band), (), "given", -100.0 * band, 0, "")
    margin = int(k * cap)
    share = rollout_share(getattr(estimate, "config", None) or {})
    out = []
    for s in estimate.stages:
        floor = s.device_bytes - s.reserved_bytes + s.allocated_bytes     # without the caching allocator's reserve
        moments = [(s.device_bytes, floor, int(s.device_bytes * (1.0 + band.fraction)),
                    getattr(s, "phase_name", "steady step"))]
        rollout = (getattr(s, "phase_bytes", None) or {}).get("rollout")
        if share is not None and rollout is not None:
            # RL rollout (estimator/memory/phases.py): the training side's resident bytes with the CUDA context and
            # NCCL buffers, beside the rollout engine's fixed share of the GPU (vLLM's gpu_memory_utilization).
            side = rollout + s.device_bytes - s.reserved_bytes - sum((getattr(s, "outside_allocator", None)
                                                                      or {}).values())
            engine = int(share * cap)
            moments.append((side + engine, side + engine, int(side * (1.0 + band.fraction)) + engine, "rollout"))
        # The moment with the worse verdict (does not fit, then amber, then fits), the higher upper bound among equals.
        point, floor, upper, phase = min(moments, key=lambda m: (
            0 if m[1] + margin > cap else (1 if m[2] + margin > cap else 2), -m[2]))
        free = cap - point
        out.append(StageFit(stage=s.stage, device_bytes=point, capacity_bytes=cap, headroom_bytes=free,
                            headroom_pct=100.0 * free / cap, fits=upper + margin <= cap,
                            tight=upper + margin > cap and floor + margin <= cap,
                            upper_bound_bytes=upper, keep_free_bytes=margin, band=band, phase=phase))
    return tuple(out)


def rollout_share(config: dict) -> float | None:
    """The rollout engine's fraction of the GPU in an RL configuration (plain data), None where there is none."""
    tr = config.get("training") or {}
    f = tr.get("rl_rollout_gpu_memory_fraction")
    return float(f) if f is not None and tr.get("rl_algorithm", "none") != "none" else None
