"""What the distributed rules share (TL501 data-parallel, TL502 ddp-sampler): the lines TL501's fix
writes into a script, so that the rewritten script runs under torchrun (one process per GPU, each
with its own shard of the data) and still as a plain `python script.py`."""

from __future__ import annotations

from torchlint.analysis.syntax import dotted_name, find_keyword, is_literal
from torchlint.lazy import libcst as cst

# in the first line the fix writes: the rule knows its own DDP call by it
MARK = "torchlint TL501"
# what earlier versions of TL501's fix wrote at a training loader (scripts fixed then still have it)
OLD_SAMPLER_HELPER = "_distributed_sampler"


def setup_lines(names: dict[str, str], indent: str, step: str, join: bool, gpu: str | None) -> str:
    """The lines that join the process group (torchrun's, or a group of this one process when run as
    plain python) when ``join``, and with ``gpu``, those that use this process's own GPU and bind
    its index (None without a GPU) to that name. ``names``: the file's names for ``os``, ``dist``
    (torch.distributed) and ``torch``, and ``backend``: the backend argument and its comma, or ""
    to let torch (2.0 and later) take NCCL for CUDA tensors and gloo for the others."""
    os, dist, torch, backend = names["os"], names["dist"], names["torch"], names["backend"]
    lines = []
    if join:
        lines += [
            f'if not {dist}.is_initialized() and "LOCAL_RANK" in {os}.environ:  # under torchrun ({MARK})',
            f'{step}{dist}.init_process_group({backend.rstrip(", ")})',
            f"elif not {dist}.is_initialized():  # run as plain python: a process group of this one process",
            f"{step}{dist}.init_process_group({backend}store={dist}.HashStore(), rank=0, world_size=1)",
        ]
    if gpu is not None:
        lines += [
            f"if {torch}.cuda.is_available():  # one GPU per process",
            f'{step}{torch}.cuda.set_device(int({os}.environ.get("LOCAL_RANK", 0)) % {torch}.cuda.device_count())',
            f"{gpu} = {torch}.cuda.current_device() if {torch}.cuda.is_available() else None",
        ]
    return "".join(f"{indent}{line}\n" for line in lines)


def is_sampler_helper(expr: cst.BaseExpression | None) -> bool:
    """A call of the sampler helper that earlier versions of TL501's fix wrote, with shuffling on
    (``_distributed_sampler(ds)``)."""
    if not isinstance(expr, cst.Call) or dotted_name(expr.func) != OLD_SAMPLER_HELPER:
        return False
    shuffle = find_keyword(expr, "shuffle")
    return shuffle is None or not is_literal(shuffle.value, False)
