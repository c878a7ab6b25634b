"""Seeds torch, shuffles with NumPy's unseeded generator (TL808, off by default, unsafe fix)."""

import numpy as np
import torch
import torch.nn as nn

torch.manual_seed(0)
features = torch.randn(1024, 8)
targets = features @ torch.randn(8, 1)
model = nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)

for epoch in range(10):
    order = np.random.permutation(len(features))
    for start in range(0, len(features), 64):
        batch = torch.from_numpy(order[start:start + 64])
        optimizer.zero_grad()
        loss = ((model(features[batch]) - targets[batch]) ** 2).mean()
        loss.backward()
        optimizer.step()
