"""Written for the torchlint verify zoo (not from AntixK/PyTorch-VAE): the VAEDataset data module
run.py imports, with synthetic 64x64 images (soft blobs) in place of CelebA, which is a download."""
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset


def blobs(count, patch_size, seed):
    generator = torch.Generator().manual_seed(seed)
    grid = torch.linspace(-1, 1, patch_size)
    rows, cols = torch.meshgrid(grid, grid, indexing="ij")
    centres = torch.rand(count, 3, 2, generator=generator) * 1.6 - 0.8
    images = torch.exp(-((rows - centres[..., 0, None, None]) ** 2 + (cols - centres[..., 1, None, None]) ** 2) * 8)
    return TensorDataset(images, torch.zeros(count, dtype=torch.long))


class VAEDataset(pl.LightningDataModule):
    def __init__(self, data_path, train_batch_size=8, val_batch_size=8, patch_size=64, num_workers=0,
                 pin_memory=False, **kwargs):
        super().__init__()
        self.train_batch_size, self.val_batch_size = train_batch_size, val_batch_size
        self.patch_size, self.num_workers, self.pin_memory = patch_size, num_workers, pin_memory

    def setup(self, stage=None):
        self.train_dataset = blobs(512, self.patch_size, seed=0)
        self.val_dataset = blobs(64, self.patch_size, seed=1)

    def train_dataloader(self):
        return DataLoader(self.train_dataset, batch_size=self.train_batch_size, num_workers=self.num_workers,
                          shuffle=True, pin_memory=self.pin_memory)

    def val_dataloader(self):
        return DataLoader(self.val_dataset, batch_size=self.val_batch_size, num_workers=self.num_workers,
                          shuffle=False, pin_memory=self.pin_memory)

    def test_dataloader(self):
        return self.val_dataloader()
