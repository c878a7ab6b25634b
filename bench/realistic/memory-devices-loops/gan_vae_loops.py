"""Training loops in the style of PyTorch's DCGAN and VAE examples: every step reads its losses on
the host (TL802, off by default), evaluation under no_grad, checkpoints per epoch."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader

device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")


def train_gan(netD, netG, dataloader, optimizerD, optimizerG, nz, epochs):
    criterion = nn.BCELoss()
    fixed_noise = torch.randn(64, nz, 1, 1, device=device)
    for epoch in range(epochs):
        for i, data in enumerate(dataloader, 0):
            netD.zero_grad()
            real = data[0].to(device)
            label = torch.full((real.size(0),), 1.0, dtype=real.dtype, device=device)
            output = netD(real)
            errD_real = criterion(output, label)
            errD_real.backward()
            D_x = output.mean().item()
            noise = torch.randn(real.size(0), nz, 1, 1, device=device)
            fake = netG(noise)
            label.fill_(0.0)
            output = netD(fake.detach())
            errD_fake = criterion(output, label)
            errD_fake.backward()
            D_G_z1 = output.mean().item()
            errD = errD_real + errD_fake
            optimizerD.step()
            netG.zero_grad()
            label.fill_(1.0)
            output = netD(fake)
            errG = criterion(output, label)
            errG.backward()
            D_G_z2 = output.mean().item()
            optimizerG.step()
            print(f"[{epoch}/{epochs}][{i}/{len(dataloader)}] Loss_D: {errD.item():.4f} Loss_G: {errG.item():.4f} "
                  f"D(x): {D_x:.4f} D(G(z)): {D_G_z1:.4f} / {D_G_z2:.4f}")
            if i % 100 == 0:
                with torch.no_grad():
                    sample = netG(fixed_noise).detach().cpu()
                torch.save(sample, f"sample_{epoch}_{i}.pt")


def vae_loss(recon_x, x, mu, logvar):
    bce = F.binary_cross_entropy(recon_x, x.view(-1, 784), reduction="sum")
    return bce - 0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())


def train_vae(model, train_loader, optimizer, epoch, log_interval):
    model.train()
    train_loss = 0
    for batch_idx, (data, _) in enumerate(train_loader):
        data = data.to(device)
        optimizer.zero_grad()
        recon_batch, mu, logvar = model(data)
        loss = vae_loss(recon_batch, data, mu, logvar)
        loss.backward()
        train_loss += loss.item()
        optimizer.step()
        if batch_idx % log_interval == 0:
            print(epoch, batch_idx, loss.item() / len(data))
    return train_loss / len(train_loader.dataset)


def test_vae(model, test_loader):
    model.eval()
    test_loss = 0
    with torch.no_grad():
        for data, _ in test_loader:
            data = data.to(device)
            recon_batch, mu, logvar = model(data)
            test_loss += vae_loss(recon_batch, data, mu, logvar).item()
    return test_loss / len(test_loader.dataset)


def main(dataset, model, optimizer, epochs):
    loader = DataLoader(dataset, batch_size=128, shuffle=True, num_workers=2, pin_memory=True)
    for epoch in range(1, epochs + 1):
        train_vae(model, loader, optimizer, epoch, 10)
        test_vae(model, loader)
        torch.cuda.empty_cache()
