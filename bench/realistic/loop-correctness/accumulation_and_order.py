"""Loop bugs with no fix: accumulation without dividing the loss (TL805), a step before the
backward (TL807) and a loop that never clears the gradients (TL804)."""

import torch
import torch.nn as nn

torch.manual_seed(0)
features = torch.randn(1024, 8)
targets = features @ torch.randn(8, 1)
model = nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
accumulation_steps = 4

for i, start in enumerate(range(0, len(features), 16)):
    loss = ((model(features[start:start + 16]) - targets[start:start + 16]) ** 2).mean()
    loss.backward()
    if (i + 1) % accumulation_steps == 0:
        optimizer.step()
        optimizer.zero_grad()

for start in range(0, len(features), 64):
    optimizer.zero_grad()
    loss = ((model(features[start:start + 64]) - targets[start:start + 64]) ** 2).mean()
    optimizer.step()
    loss.backward()

finetune = torch.optim.SGD(model.parameters(), lr=0.001)
for start in range(0, len(features), 64):
    loss = ((model(features[start:start + 64]) - targets[start:start + 64]) ** 2).mean()
    loss.backward()
    finetune.step()
