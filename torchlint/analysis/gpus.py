"""GPUs, in one spelling: the compute capability (``sm_80`` is 8.0) that the ``target-gpu``
setting names, and what each generation of tensor cores can do. Rules ask
``ctx.gpu_at_least(BF16)`` or ``ctx.gpu_below(TF32)``; both say False while the target GPU is
unknown (no ``target-gpu``), so that an unknown GPU keeps every rule's advice as it was.

A GPU is written as ``sm_80`` / ``sm_90a`` / ``compute_75``, as a capability ``"8.0"``, or by
name: ``a100``, ``"RTX 4090"``, or what ``torch.cuda.get_device_name()`` prints
(``"NVIDIA A100-SXM4-80GB"``, ``"Tesla T4"``).

Capabilities are NVIDIA's (https://developer.nvidia.com/cuda-gpus).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

Capability = tuple[int, int]

# What needs which capability
TENSOR_CORES: Capability = (7, 0)  # float16 tensor cores (Volta)
TF32: Capability = (8, 0)  # TensorFloat-32 matmuls (Ampere)
BF16: Capability = (8, 0)  # bfloat16 in hardware and on tensor cores (Ampere)
FP8: Capability = (8, 9)  # float8 matmuls (Ada Lovelace, Hopper)

# name -> compute capability; names are lower case without spaces or dashes (see _normalized)
GPUS: dict[str, Capability] = {
    # Kepler, Maxwell
    "k40": (3, 5), "k80": (3, 7), "m40": (5, 2), "m60": (5, 2), "gtx980": (5, 2), "gtxtitanx": (5, 2),
    # Pascal
    "p100": (6, 0), "p40": (6, 1), "p4": (6, 1), "gtx1060": (6, 1), "gtx1070": (6, 1), "gtx1080": (6, 1),
    "gtx1080ti": (6, 1), "titanxp": (6, 1),
    # Volta, Turing
    "v100": (7, 0), "titanv": (7, 0), "xavier": (7, 2),
    "t4": (7, 5), "rtx2060": (7, 5), "rtx2070": (7, 5), "rtx2080": (7, 5), "rtx2080ti": (7, 5),
    "titanrtx": (7, 5), "rtx6000": (7, 5), "rtx8000": (7, 5),
    # Ampere
    "a100": (8, 0), "a800": (8, 0), "a30": (8, 0),
    "a10": (8, 6), "a10g": (8, 6), "a16": (8, 6), "a2": (8, 6), "a40": (8, 6), "a4000": (8, 6),
    "a5000": (8, 6), "a6000": (8, 6), "rtxa4000": (8, 6), "rtxa5000": (8, 6), "rtxa6000": (8, 6),
    "rtx3060": (8, 6), "rtx3070": (8, 6), "rtx3080": (8, 6), "rtx3080ti": (8, 6), "rtx3090": (8, 6),
    "rtx3090ti": (8, 6), "orin": (8, 7),
    # Ada Lovelace
    "l4": (8, 9), "l40": (8, 9), "l40s": (8, 9), "rtx4060": (8, 9), "rtx4070": (8, 9), "rtx4080": (8, 9),
    "rtx4090": (8, 9), "rtx6000ada": (8, 9),
    # Hopper
    "h100": (9, 0), "h800": (9, 0), "h200": (9, 0), "h20": (9, 0), "gh200": (9, 0),
    # Blackwell
    "b100": (10, 0), "b200": (10, 0), "gb200": (10, 0), "b300": (10, 3), "gb300": (10, 3),
    "rtx5070": (12, 0), "rtx5080": (12, 0), "rtx5090": (12, 0), "rtxpro6000": (12, 0), "gb10": (12, 1),
}
# words of a device name that say nothing of the GPU
VENDOR_WORDS = frozenset({"nvidia", "geforce", "tesla", "quadro", "jetson", "agx", "dgx"})
SM = re.compile(r"(?:sm|compute)_?(\d+)(\d)[af]?")
DOTTED = re.compile(r"(\d+)\.(\d)")
ARCHITECTURES = ((12, 0, "Blackwell"), (10, 0, "Blackwell"), (9, 0, "Hopper"), (8, 9, "Ada Lovelace"),
                 (8, 0, "Ampere"), (7, 5, "Turing"), (7, 0, "Volta"), (6, 0, "Pascal"), (5, 0, "Maxwell"),
                 (3, 0, "Kepler"))
ACCEPTED = ('`sm_XY` ("sm_80", "sm_90a"), a compute capability ("8.0"), or a GPU name ('
            + ", ".join(GPUS) + '; also as torch.cuda.get_device_name() prints it, "NVIDIA A100-SXM4-80GB")')


@dataclass(frozen=True)
class Gpu:
    """The GPU the code runs on: its compute capability, and the name it was given by, if any."""

    capability: Capability
    name: str | None = None

    @property
    def sm(self) -> str:
        return f"sm_{self.capability[0]}{self.capability[1]}"

    @property
    def architecture(self) -> str:
        return architecture(self.capability)

    def at_least(self, spec: str | Capability) -> bool:
        return self.capability >= capability(spec)

    def __str__(self) -> str:
        return f"{self.name} ({self.sm})" if self.name else self.sm


def architecture(capability_: Capability) -> str:
    """``(8, 0)`` -> ``"Ampere"``; ``"unknown"`` below Kepler."""
    return next((name for major, minor, name in ARCHITECTURES if capability_ >= (major, minor)), "unknown")


def _normalized(words: list[str]) -> str:
    return "".join(words).lower()


def _by_name(text: str) -> tuple[str, Capability] | None:
    """The table's entry for a device name: the longest run of its first words that the table
    knows (``"NVIDIA H100 80GB HBM3"`` -> h100, ``"RTX 6000 Ada Generation"`` -> rtx6000ada)."""
    words = [w for w in re.split(r"[\s\-_/]+", text.strip().lower()) if w and w not in VENDOR_WORDS]
    for count in range(len(words), 0, -1):
        key = _normalized(words[:count])
        if key in GPUS:
            return key, GPUS[key]
    return None


def parse_gpu(text: str) -> Gpu:
    """A ``target-gpu`` value -> a Gpu; ValueError (whose text lists the accepted forms) otherwise."""
    spelled = str(text).strip()
    lowered = spelled.lower()
    match = SM.fullmatch(lowered) or DOTTED.fullmatch(lowered)
    if match:
        return Gpu((int(match.group(1)), int(match.group(2))))
    found = _by_name(spelled)
    if found is not None:
        return Gpu(found[1], found[0].upper())
    raise ValueError(f"not a GPU: {spelled!r}")


def capability(spec: str | Capability) -> Capability:
    """``"sm_80"``, ``"8.0"``, ``"a100"`` or ``(8, 0)`` -> ``(8, 0)``."""
    if isinstance(spec, tuple):
        return spec
    return parse_gpu(spec).capability
