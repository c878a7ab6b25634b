"""A classifier whose logits go through a softmax before the cross-entropy (TL407, unsafe fix)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
features = torch.randn(2048, 20)
labels = (features[:, :5].sum(1) > 0).long() + (features[:, 5:10].sum(1) > 0).long()
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 3))
optimizer = torch.optim.SGD(model.parameters(), lr=0.5)

for epoch in range(20):
    for start in range(0, len(features), 64):
        x, y = features[start:start + 64], labels[start:start + 64]
        optimizer.zero_grad()
        probabilities = F.softmax(model(x), dim=1)
        loss = F.cross_entropy(probabilities, y)
        loss.backward()
        optimizer.step()
