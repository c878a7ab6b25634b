"""A long-lived process (the language server) lints a small training script once while it starts,
so that the first document a user opens does not pay for what a process's first lint loads: the
rest of LibCST (its native parser, its code generator for positions), the rules' data tables and
the interpreter's specialised code for the engine's and the rules' functions."""

from __future__ import annotations

import logging

SCRIPT = '''\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

device = torch.device("cuda")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, bias=True)
        self.bn = nn.BatchNorm2d(8)

    def forward(self, x):
        return self.bn(self.conv(x)).mean((2, 3))


loader = DataLoader(TensorDataset(torch.randn(64, 3, 8, 8), torch.randint(0, 8, (64,))), batch_size=8)
model = nn.DataParallel(Net()).cuda()
optimizer = torch.optim.Adam(model.parameters())
losses = []
for epoch in range(2):
    for x, y in loader:
        x, y = x.cuda(), y.cuda()
        optimizer.zero_grad(set_to_none=False)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss)
        print(f"loss {loss.item():.3f}")
    model.eval()
    for x, y in loader:
        accuracy = (model(x.cuda()).argmax(1) == y.cuda()).float().mean()
'''


def warm_up() -> None:
    """Lint ``SCRIPT`` with every rule; a failure here is logged and never stops the caller."""
    try:
        from torchlint.config import resolve_settings
        from torchlint.engine import lint_source

        lint_source(SCRIPT, "warm_up.py", resolve_settings(None, isolated=True, select=["ALL"]), crashes=[])
    except Exception:  # noqa: BLE001 - warming up is an optimisation: the server starts regardless
        logging.getLogger("torchlint.lsp").warning("warming up failed", exc_info=True)
