"""What `torch.compile(...)` called on every step costs (TLC002 compile-in-loop's docs quote it).

    OMP_NUM_THREADS=1 .venv/bin/python bench/compile_in_loop.py [--steps N]

Trains a small MLP on the CPU for N steps twice, in separate processes: once with
`compiled = torch.compile(model)` inside the loop, once with it before the loop, and prints the
median step time of each (the first steps, which compile, left out) and how many graphs Dynamo
compiled. One thread, because on a shared machine Inductor's OpenMP kernels wait for busy cores
and their latency, not the wrapper, would dominate the timings.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

RUN = r'''
import sys, time
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch._dynamo.utils import counters

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
batches = [(torch.randn(16, 32), torch.randint(0, 10, (16,))) for _ in range(int(sys.argv[2]))]
in_loop = sys.argv[1] == "in-loop"
compiled = None if in_loop else torch.compile(model)
times = []
for x, y in batches:
    start = time.perf_counter()
    if in_loop:
        compiled = torch.compile(model)
    loss = F.cross_entropy(compiled(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    times.append(time.perf_counter() - start)
later = sorted(times[5:])
print(f"{sys.argv[1]:>12}: median step {later[len(later) // 2] * 1e3:.2f} ms, "
      f"graphs compiled {counters['stats']['unique_graphs']}")
'''


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    for variant in ("in-loop", "before-loop"):
        done = subprocess.run([sys.executable, "-c", RUN, variant, str(args.steps)], capture_output=True, text=True)
        print(done.stdout.strip() or done.stderr.strip().splitlines()[-1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
