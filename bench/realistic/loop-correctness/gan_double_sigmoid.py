"""A GAN on 2-D points whose discriminator scores go through a sigmoid before
BCEWithLogitsLoss (TL408, unsafe fix)."""

import torch
import torch.nn as nn

torch.manual_seed(0)
generator = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 2))
discriminator = nn.Sequential(nn.Linear(2, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1))
adversarial = nn.BCEWithLogitsLoss()
opt_g = torch.optim.Adam(generator.parameters(), lr=1e-3)
opt_d = torch.optim.Adam(discriminator.parameters(), lr=1e-3)

for step in range(300):
    real = torch.randn(64, 2) * 0.5 + torch.tensor([2.0, -1.0])
    noise = torch.randn(64, 4)
    ones, zeros = torch.ones(64, 1), torch.zeros(64, 1)

    opt_d.zero_grad()
    real_score = discriminator(real)
    fake_score = discriminator(generator(noise).detach())
    d_loss = adversarial(torch.sigmoid(real_score), ones) + adversarial(torch.sigmoid(fake_score), zeros)
    d_loss.backward()
    opt_d.step()

    opt_g.zero_grad()
    judged = torch.sigmoid(discriminator(generator(noise)))
    g_loss = adversarial(judged, ones)
    g_loss.backward()
    opt_g.step()
    if step % 100 == 0:
        print(f"step {step}: d {d_loss.item():.3f} g {g_loss.item():.3f}")
