"""The reference training harness behind ``torchlint verify``.

It proves that a fixed script still trains: the original and the fixed script each run in their
own subprocess, under the same seeds, for N optimizer steps, instrumented from the outside.

- ``bootstrap``: runs inside each subprocess: seeds, hooks, the CUDA-to-CPU mapping, then the script.
- ``cuda_mapping``: lets a script written for CUDA run on a machine without one.
- ``runner``: launches one run (plain ``python`` or ``torchrun``), with a timeout and progress.
- ``verdict``: decides pass or fail from the two runs and the fixes that were applied.
- ``verify``: copies the script's folder, applies the fixes, runs, judges.
- ``report``: the text table, the JSON object and the optional plot.
- ``cli``: the ``torchlint verify`` command.

Nothing here imports torch in the parent process; only the bootstrap does, in the subprocess.
This module stays free of imports so that the bootstrap, which imports from it, starts fast.
"""
