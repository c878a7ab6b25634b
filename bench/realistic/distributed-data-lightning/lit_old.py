import os

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, random_split
from torchvision import transforms
from torchvision.datasets import MNIST


class LitMNIST(pl.LightningModule):
    def __init__(self, data_dir=os.getcwd(), hidden_size=64, learning_rate=2e-4):
        super().__init__()
        self.save_hyperparameters()
        self.model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, hidden_size),
                                         torch.nn.ReLU(), torch.nn.Linear(hidden_size, 10))
        self.class_weights = torch.ones(10).cuda()

    def forward(self, x):
        return F.log_softmax(self.model(x), dim=1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        noise = torch.randn(x.shape).cuda() * 0.01
        loss = F.nll_loss(self(x + noise), y, weight=self.class_weights)
        self.log("train_loss", loss.item())
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        loss = F.nll_loss(logits, y)
        acc = (logits.argmax(dim=1) == y).float().mean()
        self.log_dict({"val_loss": loss.item(), "val_acc": acc.item()}, prog_bar=True)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.learning_rate)

    def setup(self, stage=None):
        mnist_full = MNIST(self.hparams.data_dir, train=True, transform=transforms.ToTensor())
        self.mnist_train, self.mnist_val = random_split(mnist_full, [55000, 5000])

    def train_dataloader(self):
        return DataLoader(self.mnist_train, batch_size=32, num_workers=4)

    def val_dataloader(self):
        return DataLoader(self.mnist_val, batch_size=32)


if __name__ == "__main__":
    model = LitMNIST()
    trainer = pl.Trainer(gpus=1, max_epochs=3, precision=16, progress_bar_refresh_rate=20,
                         weights_summary="top", resume_from_checkpoint=None)
    trainer.fit(model)
