"""What the distributed rules share (TL501 data-parallel, TL502 ddp-sampler): the helpers TL501's
fix writes into a script, so that the rewritten script runs under torchrun (one process per GPU,
each with its own shard of the data) and still as a plain `python script.py`."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.syntax import dotted_name, find_keyword, is_literal

WRAP_HELPER = "_distributed_data_parallel"
SAMPLER_HELPER = "_distributed_sampler"
HELPERS_SOURCE = f'''

def _init_distributed():
    """Join the process group (written by torchlint's TL501 fix): under torchrun, the one torchrun
    set up; run as a plain `python` script, a group of one process, so the script runs as before.
    """
    import os

    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        if "LOCAL_RANK" in os.environ:
            dist.init_process_group(backend)
        else:
            dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)


def {SAMPLER_HELPER}(dataset, shuffle=True):
    """A DistributedSampler: each process of the group reads its own shard of `dataset`."""
    import torch.utils.data

    _init_distributed()
    return torch.utils.data.DistributedSampler(dataset, shuffle=shuffle)


def {WRAP_HELPER}(module):
    """Wrap `module` in DistributedDataParallel, on this process's own GPU when there is one."""
    import os

    import torch

    _init_distributed()
    if torch.cuda.is_available():
        local_rank = int(os.environ.get("LOCAL_RANK", 0)) % torch.cuda.device_count()
        torch.cuda.set_device(local_rank)
        module = module.cuda(local_rank)
        return torch.nn.parallel.DistributedDataParallel(module, device_ids=[local_rank])
    return torch.nn.parallel.DistributedDataParallel(module)
'''


def is_sampler_helper(expr: cst.BaseExpression | None) -> bool:
    """A call of the sampler TL501's fix writes, with shuffling on (``_distributed_sampler(ds)``)."""
    if not isinstance(expr, cst.Call) or dotted_name(expr.func) != SAMPLER_HELPER:
        return False
    shuffle = find_keyword(expr, "shuffle")
    return shuffle is None or not is_literal(shuffle.value, False)
