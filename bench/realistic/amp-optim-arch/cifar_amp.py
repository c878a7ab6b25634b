"""Written for the precision check of the AMP, optimizer and architecture rules
(bench/results/catalog-precision-amp-optim-arch.md): a CIFAR-100 CNN in float16 autocast."""
import torch
import torch.nn as nn
import torchvision
import torchvision.transforms as T


class Net(nn.Module):
    def __init__(self, num_classes=100):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
            nn.Conv2d(64, 128, 3, padding=1, bias=False), nn.BatchNorm2d(128), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(128, 256, 3, padding=1, bias=False), nn.BatchNorm2d(256), nn.ReLU(), nn.AdaptiveAvgPool2d(2),
        )
        self.head = nn.Sequential(nn.Linear(1024, 500), nn.ReLU(), nn.Linear(500, num_classes))

    def forward(self, x):
        x = self.features(x)
        return self.head(x.view(x.size(0), -1))


def main():
    device = "cuda"
    data = torchvision.datasets.CIFAR100("data", train=True, download=True, transform=T.ToTensor())
    loader = torch.utils.data.DataLoader(data, batch_size=128, shuffle=True, num_workers=4, pin_memory=True)
    model = Net().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=5e-4)
    scaler = torch.amp.GradScaler("cuda")
    for epoch in range(30):
        for images, labels in loader:
            images, labels = images.to(device, non_blocking=True), labels.to(device, non_blocking=True)
            with torch.autocast("cuda", dtype=torch.float16):
                loss = nn.functional.cross_entropy(model(images), labels)
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            scaler.step(optimizer)
            scaler.update()


if __name__ == "__main__":
    main()
