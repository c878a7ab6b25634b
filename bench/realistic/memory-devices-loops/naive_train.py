import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset
from tqdm import tqdm

torch.autograd.set_detect_anomaly(True)
device = "cuda" if torch.cuda.is_available() else "cpu"


class NpyDataset(Dataset):
    def __init__(self, files, labels):
        self.files, self.labels = files, labels

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        x = np.load(self.files[i]).astype(np.float32)
        y = self.labels[i]
        return torch.tensor(x), torch.tensor(y)


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=5000):
        super().__init__()
        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-np.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.pe = pe.unsqueeze(0).to(device)
        self.mask = torch.triu(torch.ones(max_len, max_len), diagonal=1).bool().to(device)

    def forward(self, x):
        return x + self.pe[:, : x.size(1)]


class Classifier(nn.Module):
    def __init__(self, d, n_classes):
        super().__init__()
        self.pos = PositionalEncoding(d)
        self.enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(d, 4, batch_first=True), 2)
        self.head = nn.Linear(d, n_classes)
        self.class_weights = torch.ones(n_classes, device=device)

    def forward(self, x):
        return self.head(self.enc(self.pos(x)).mean(1))


def main(files, labels):
    ds = NpyDataset(files, labels)
    train_loader = DataLoader(ds, batch_size=32, shuffle=True, num_workers=4, pin_memory=True)
    val_loader = DataLoader(ds, batch_size=64, num_workers=4, pin_memory=True)
    model = Classifier(64, 10).to(device)
    temperature = torch.ones(1, requires_grad=True).to(device)
    optimizer = torch.optim.AdamW(list(model.parameters()) + [temperature], lr=3e-4)
    criterion = nn.CrossEntropyLoss()
    best = 0.0
    for epoch in range(10):
        model.train()
        losses = []
        pbar = tqdm(train_loader)
        for x, y in pbar:
            x = x.to(device)
            y = y.to(device)
            logits = model(x) / temperature
            loss = criterion(logits, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            pbar.set_postfix(loss=loss.item())
            torch.cuda.empty_cache()
        model.eval()
        correct = total = 0
        for x, y in val_loader:
            x, y = x.to(device), y.to(device)
            preds = model(x).argmax(-1)
            correct += (preds == y).sum().item()
            total += y.numel()
        acc = correct / total
        if acc > best:
            best = acc
            torch.save(model.state_dict(), "best.pt")
        print(f"epoch {epoch}: loss {np.mean(losses):.4f} acc {acc:.4f}")
        torch.cuda.empty_cache()
