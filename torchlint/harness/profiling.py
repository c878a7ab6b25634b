"""Measure where a training step's time goes, by source line; the subprocess side of
``torchlint verify --profile``.

The bootstrap imports this module only for the profiling run. It runs the script under
``torch.profiler`` (with the Python tracer, ``with_stack=True``) for a few optimizer steps after a
warm-up, then walks the profiler's event tree and sums, per source line of the script, the time
of the operations that the anti-patterns cost:

- ``host-sync``: ``aten::item``, ``aten::_local_scalar_dense``, ``aten::is_nonzero`` and CUDA
  stream, event and device synchronizations (the host waits for the device);
- ``host-copy``: ``aten::to``/``_to_copy``/``copy_`` and pinning, and CUDA memcpy calls;
- ``loader-wait``: the time ``next()`` on a DataLoader's iterator takes (with no workers, the
  whole loading and collation of the batch), attributed to the line that built the DataLoader;
- ``optimizer-step``: ``optimizer.step()``, attributed to the line that built the optimizer,
  with the number of operations it runs per step (what a fused optimizer would replace);
- ``zero-grad``: ``optimizer.zero_grad()``; ``empty-cache``: ``torch.cuda.empty_cache()``.

An operation is attributed to the innermost line of the script on its Python call stack (the
tracer records each call's call site); an operation inside another measured one counts once,
for the outer one. Lines of modules the script imports are not attributed: the findings, and
the fixes, are the script's.

The event tree is ``torch.profiler``'s own (``profile.profiler.kineto_results
.experimental_event_tree()``, what torch's anti-pattern matcher reads); if a torch version lacks
it, the run says so instead of guessing.
"""

from __future__ import annotations

import os
import sys
import time
from collections import defaultdict

import torch
from torch.autograd.profiler import record_function

HOST_SYNC_OPS = frozenset({"aten::item", "aten::_local_scalar_dense", "aten::is_nonzero", "cudaStreamSynchronize",
                           "cudaDeviceSynchronize", "cudaEventSynchronize"})
HOST_COPY_OPS = frozenset({"aten::to", "aten::_to_copy", "aten::copy_", "aten::pin_memory", "aten::_pin_memory",
                           "cudaMemcpy", "cudaMemcpyAsync"})
ANNOTATION = "torchlint."  # record_function names this module adds: torchlint.<category>@<line>


def category(name: str) -> str | None:
    """What an event of this name measures, or None when it is not one of the costs we attribute."""
    if name.startswith(ANNOTATION):
        return name[len(ANNOTATION):].split("@", 1)[0]
    if name in HOST_SYNC_OPS:
        return "host-sync"
    if name in HOST_COPY_OPS:
        return "host-copy"
    if name.startswith("Optimizer.zero_grad#"):
        return "zero-grad"
    return None


def _annotated_line(name: str) -> int | None:
    if name.startswith(ANNOTATION) and "@" in name:
        line = name.rsplit("@", 1)[1]
        return int(line) if line.isdigit() else None
    return None


class ScriptLines:
    """The line of the script that is running now, innermost first, from the interpreter's frames."""

    def __init__(self, script: str):
        self.script = os.path.realpath(script)
        self._known: dict[str, bool] = {}

    def is_script(self, filename: str) -> bool:
        if filename not in self._known:
            self._known[filename] = os.path.realpath(filename) == self.script if filename else False
        return self._known[filename]

    def current(self) -> int | None:
        frame = sys._getframe(1)
        while frame is not None:
            if self.is_script(frame.f_code.co_filename):
                return frame.f_lineno
            frame = frame.f_back
        return None


def annotate(lines: ScriptLines) -> None:
    """Name the DataLoader waits, optimizer steps and cache clears after the script line that made
    the loader or optimizer (where the findings about them are), or that called ``empty_cache``."""
    from torch.utils.data import DataLoader
    from torch.utils.data.dataloader import _BaseDataLoaderIter

    original_loader_init = DataLoader.__init__

    def loader_init(self, *args, **kwargs):
        original_loader_init(self, *args, **kwargs)
        if getattr(self, "_torchlint_line", None) is None:
            object.__setattr__(self, "_torchlint_line", lines.current())

    original_iter_init = _BaseDataLoaderIter.__init__

    def iter_init(self, loader, *args, **kwargs):
        original_iter_init(self, loader, *args, **kwargs)
        self._torchlint_line = getattr(loader, "_torchlint_line", None)

    original_next = _BaseDataLoaderIter.__next__

    def next_batch(self):
        with record_function(f"{ANNOTATION}loader-wait@{getattr(self, '_torchlint_line', None)}"):
            return original_next(self)

    DataLoader.__init__ = loader_init
    _BaseDataLoaderIter.__init__ = iter_init
    _BaseDataLoaderIter.__next__ = next_batch

    original_optimizer_init = torch.optim.Optimizer.__init__

    def optimizer_init(self, *args, **kwargs):
        original_optimizer_init(self, *args, **kwargs)
        if getattr(self, "_torchlint_line", None) is None:
            self._torchlint_line = lines.current()

    torch.optim.Optimizer.__init__ = optimizer_init
    open_steps: dict[int, record_function] = {}

    def before_step(optimizer, args, kwargs):
        region = record_function(f"{ANNOTATION}optimizer-step@{getattr(optimizer, '_torchlint_line', None)}")
        region.__enter__()
        open_steps[id(optimizer)] = region

    def after_step(optimizer, args, kwargs):
        region = open_steps.pop(id(optimizer), None)
        if region is not None:
            region.__exit__(None, None, None)

    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    register_optimizer_step_pre_hook(before_step)
    register_optimizer_step_post_hook(after_step)  # before the step recorder's hook, which may stop the run

    original_empty_cache = torch.cuda.empty_cache

    def empty_cache():
        with record_function(f"{ANNOTATION}empty-cache@{lines.current()}"):
            return original_empty_cache()

    torch.cuda.empty_cache = empty_cache


class StepProfiler:
    """Profiles optimizer steps ``warmup + 1`` to ``warmup + steps``; ``summary`` is what was measured."""

    def __init__(self, script: str, warmup: int, steps: int, device: str):
        self.lines = ScriptLines(script)
        self.warmup = warmup
        self.steps = steps
        self.device = device
        self.summary: dict | None = None
        self._profile = None
        self._started = 0.0
        annotate(self.lines)

    def after_step(self, step: int) -> None:
        """Called by the step recorder after each optimizer step (before it may stop the run)."""
        if step == self.warmup:
            self._start()
        elif step == self.warmup + self.steps and self._profile is not None:
            self._stop()

    def _start(self) -> None:
        activities = [torch.profiler.ProfilerActivity.CPU]
        if self.device == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self._profile = torch.profiler.profile(activities=activities, with_stack=True)
        self._profile.__enter__()
        self._started = time.perf_counter()

    def _stop(self) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()
        window_s = time.perf_counter() - self._started
        self._profile.__exit__(None, None, None)
        try:
            roots = self._profile.profiler.kineto_results.experimental_event_tree()
        except AttributeError:
            self.summary = {"error": f"torch {torch.__version__} has no profiler event tree to attribute time with"}
            return
        self.summary = {"steps": self.steps, "window_s": window_s, "costs": attribute(roots, self.lines)}
        self._profile = None


def attribute(roots, lines: ScriptLines) -> list[dict]:
    """Sum the measured categories per (category, script line), outermost events only.

    Containment is by time on the thread, not by the tree: an annotation opened in one Python
    frame (an optimizer step pre-hook) is not the parent of the operations that run after it in
    the tree, but it spans them in time."""
    from torch._C._profiler import _EventType

    python_calls = (_EventType.PyCall, _EventType.PyCCall)
    measured, operators = [], []  # (start, end, thread, kind, line); (start, thread) of outermost aten ops
    stack = [(root, None, False) for root in reversed(roots)]
    while stack:
        node, line, in_operator = stack.pop()
        if node.tag in python_calls and lines.is_script(node.extra_fields.caller.file_name):
            line = node.extra_fields.caller.line_number
        thread = getattr(node, "start_tid", 0)
        kind = category(node.name)
        if kind is not None:
            where = _annotated_line(node.name) if node.name.startswith(ANNOTATION) else line
            measured.append((node.start_time_ns, node.end_time_ns, thread, kind, where))
        is_operator = node.name.startswith("aten::")
        if is_operator and not in_operator:
            operators.append((node.start_time_ns, thread))
        stack.extend((child, line, in_operator or is_operator) for child in reversed(node.children))

    totals: dict[tuple[str, int | None], dict] = defaultdict(lambda: {"us": 0.0, "count": 0, "ops": 0})
    outer: dict[int, int] = {}  # thread -> end of the outermost measured event open on it
    for start, end, thread, kind, where in sorted(measured, key=lambda event: (event[0], -event[1])):
        if start < outer.get(thread, -1):
            continue  # inside a measured event: counted there
        outer[thread] = end
        total = totals[(kind, where)]
        total["us"] += max(0, end - start) / 1e3
        total["count"] += 1
        if kind == "optimizer-step":
            total["ops"] += sum(1 for op_start, op_thread in operators if op_thread == thread and start <= op_start < end)
    return [{"category": kind, "line": where, **total} for (kind, where), total in totals.items()]
