"""A log-softmax before the cross-entropy: redundant, same values (TL407, safe fix)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
features = torch.randn(2048, 20)
labels = (features[:, :5].sum(1) > 0).long() + (features[:, 5:10].sum(1) > 0).long()
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 3))
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

for epoch in range(20):
    for start in range(0, len(features), 64):
        x, y = features[start:start + 64], labels[start:start + 64]
        optimizer.zero_grad()
        loss = criterion(F.log_softmax(model(x), dim=1), y)
        loss.backward()
        optimizer.step()
