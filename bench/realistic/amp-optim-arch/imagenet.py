"""Written for the precision check of the AMP, optimizer and architecture rules
(bench/results/catalog-precision-amp-optim-arch.md)."""
import argparse
import time

import torch
import torch.nn as nn
import torchvision
import torchvision.transforms as T
from torch.utils.data import DataLoader


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", default="/data/imagenet")
    args = parser.parse_args()
    device = torch.device("cuda")
    train_set = torchvision.datasets.ImageFolder(args.data, T.Compose([T.RandomResizedCrop(224), T.ToTensor()]))
    loader = DataLoader(train_set, batch_size=256, shuffle=True, num_workers=8, pin_memory=True)
    model = torchvision.models.resnet50().to(device)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    for epoch in range(90):
        model.train()
        end = time.time()
        for images, target in loader:
            images = images.to(device, non_blocking=True)
            target = target.to(device, non_blocking=True)
            output = model(images)
            loss = criterion(output, target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(epoch, time.time() - end)


if __name__ == "__main__":
    main()
