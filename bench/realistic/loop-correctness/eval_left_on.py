"""Validation after each epoch leaves the model in eval mode for the next one (TL806, unsafe fix)."""

import torch
import torch.nn as nn

torch.manual_seed(0)
features = torch.randn(1024, 16)
labels = (features.sum(1) > 0).long()
val_features, val_labels = torch.randn(256, 16), None
val_labels = (val_features.sum(1) > 0).long()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Dropout(0.3))
        self.head = nn.Linear(64, 2)

    def forward(self, x):
        return self.head(self.body(x))


def evaluate(net):
    net.eval()
    with torch.no_grad():
        return (net(val_features).argmax(1) == val_labels).float().mean().item()


model = Net()
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model.train()
for epoch in range(10):
    for start in range(0, len(features), 32):
        optimizer.zero_grad()
        loss = criterion(model(features[start:start + 32]), labels[start:start + 32])
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch}: accuracy {evaluate(model):.3f}")
