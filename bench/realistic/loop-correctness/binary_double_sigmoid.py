"""A binary classifier whose scores go through a sigmoid before BCEWithLogitsLoss (TL408,
unsafe fix); the accuracy is computed from the logits."""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
features = torch.randn(2048, 20)
labels = ((features[:, :10].sum(1) - features[:, 10:].sum(1)) > 0).float()
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.2)

for epoch in range(20):
    for start in range(0, len(features), 64):
        x, y = features[start:start + 64], labels[start:start + 64]
        optimizer.zero_grad()
        logits = model(x).squeeze(1)
        loss = F.binary_cross_entropy_with_logits(torch.sigmoid(logits), y)
        loss.backward()
        optimizer.step()
        accuracy = ((logits > 0).float() == y).float().mean()
