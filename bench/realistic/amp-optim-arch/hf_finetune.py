"""Written for the precision check of the AMP, optimizer and architecture rules
(bench/results/catalog-precision-amp-optim-arch.md)."""
import torch
from torch.cuda.amp import GradScaler, autocast
from transformers import AutoModelForSequenceClassification

model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased").cuda()
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
scaler = GradScaler()


def train_epoch(loader):
    model.train()
    for batch in loader:
        batch = {k: v.cuda() for k, v in batch.items()}
        optimizer.zero_grad()
        with autocast():
            outputs = model(**batch)
            loss = outputs.loss
        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()


if __name__ == "__main__":
    for epoch in range(3):
        train_epoch(train_loader)
