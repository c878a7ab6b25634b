# Source: https://github.com/pytorch/tutorials/blob/00b83bfab7d1cd0cd7c53fbba59db65c2e021bb6/recipes_source/recipes/amp_recipe.py
# Commit: 00b83bfab7d1cd0cd7c53fbba59db65c2e021bb6
# License: BSD-3-Clause, Copyright (c) 2017-2022, PyTorch contributors (full text: bench/zoo/LICENSES.md)
# PyTorch's own automatic mixed precision recipe: a network trained in default precision, then
# with torch.cuda.amp.autocast and GradScaler. Changes for `torchlint verify` on a CPU in seconds:
# - sizes: batch_size 64 (was 512), in_size and out_size 256 (were 4096), num_batches 8 (was 50),
#   epochs 1 (was 3), so that 8 default-precision steps are followed by 8 mixed-precision ones;
# - the tutorial's prose between code sections (reStructuredText comments for the web page) is
#   left out, and so are its three illustration-only loops of zero epochs; the code that runs is
#   as published.
"""
Automatic Mixed Precision
*************************
**Author**: `Michael Carilli <https://github.com/mcarilli>`_
"""

import torch, time, gc

# Timing utilities
start_time = None

def start_timer():
    global start_time
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_max_memory_allocated()
    torch.cuda.synchronize()
    start_time = time.time()

def end_timer_and_print(local_msg):
    torch.cuda.synchronize()
    end_time = time.time()
    print("\n" + local_msg)
    print("Total execution time = {:.3f} sec".format(end_time - start_time))
    print("Max memory used by tensors = {} bytes".format(torch.cuda.max_memory_allocated()))

##########################################################
# A simple network
# ----------------

def make_model(in_size, out_size, num_layers):
    layers = []
    for _ in range(num_layers - 1):
        layers.append(torch.nn.Linear(in_size, in_size))
        layers.append(torch.nn.ReLU())
    layers.append(torch.nn.Linear(in_size, out_size))
    return torch.nn.Sequential(*tuple(layers)).cuda()

batch_size = 64 # Try, for example, 128, 256, 513.
in_size = 256
out_size = 256
num_layers = 3
num_batches = 8
epochs = 1

# Creates data in default precision.
# The same data is used for both default and mixed precision trials below.
# You don't need to manually change inputs' dtype when enabling mixed precision.
data = [torch.randn(batch_size, in_size, device="cuda") for _ in range(num_batches)]
targets = [torch.randn(batch_size, out_size, device="cuda") for _ in range(num_batches)]

loss_fn = torch.nn.MSELoss().cuda()

##########################################################
# Default Precision
# -----------------

net = make_model(in_size, out_size, num_layers)
opt = torch.optim.SGD(net.parameters(), lr=0.001)

start_timer()
for epoch in range(epochs):
    for input, target in zip(data, targets):
        output = net(input)
        loss = loss_fn(output, target)
        loss.backward()
        opt.step()
        opt.zero_grad() # set_to_none=True here can modestly improve performance
end_timer_and_print("Default precision:")

##########################################################
# All together ("Automatic Mixed Precision")
# ------------------------------------------

use_amp = True

net = make_model(in_size, out_size, num_layers)
opt = torch.optim.SGD(net.parameters(), lr=0.001)
scaler = torch.cuda.amp.GradScaler(enabled=use_amp)

start_timer()
for epoch in range(epochs):
    for input, target in zip(data, targets):
        with torch.cuda.amp.autocast(enabled=use_amp):
            output = net(input)
            loss = loss_fn(output, target)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
end_timer_and_print("Mixed precision:")

##########################################################
# Saving/Resuming
# ----------------

checkpoint = {"model": net.state_dict(),
              "optimizer": opt.state_dict(),
              "scaler": scaler.state_dict()}

net.load_state_dict(checkpoint["model"])
opt.load_state_dict(checkpoint["optimizer"])
scaler.load_state_dict(checkpoint["scaler"])
