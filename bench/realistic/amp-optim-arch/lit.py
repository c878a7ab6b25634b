"""Written for the precision check of the AMP, optimizer and architecture rules
(bench/results/catalog-precision-amp-optim-arch.md)."""
import pytorch_lightning as pl
import torch


class LitModel(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Conv2d(3, 8, 3)

    def training_step(self, batch, batch_idx):
        return self.layer(batch).sum()

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


trainer = pl.Trainer(accelerator="gpu", devices=1, precision="16-mixed")
trainer.fit(LitModel())
