"""Written for the precision check of the AMP, optimizer and architecture rules
(bench/results/catalog-precision-amp-optim-arch.md)."""
import torch
from apex import amp

model = LightningModel().cuda()
optimizers = torch.optim.Adam(model.parameters())
model, optimizers = amp.initialize(model, optimizers, opt_level='O2')

for batch in loader:
    loss = model.training_step(batch)
    # when doing .backward, let amp do it so it can scale the loss
    with amp.scale_loss(loss, optimizers) as scaled_loss:
        scaled_loss.backward()
    optimizers.step()
