# Snippets from the seeds (guide-9-tips-lightning-fast.md, lightning-speed-docs.rst), made runnable-looking.
from pytorch_lightning import Trainer
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

trainer = Trainer(gpus=[0])
trainer = Trainer(gpus=[0, 1, 2, 3])
trainer = Trainer(nb_gpu_nodes=128, gpus=[0, 1, 2, 3, 4, 5, 6, 7])
trainer = Trainer(distributed_backend='ddp', gpus=[0, 1, 2, 3])
trainer = Trainer(precision=16, accelerator="gpu", devices=4)
loader = DataLoader(dataset, batch_size=32, shuffle=True, num_workers=10)


def tng_dataloader():
    d = MNIST()
    dist_sampler = DistributedSampler(dataset)
    dataloader = DataLoader(d, shuffle=False, sampler=dist_sampler)
