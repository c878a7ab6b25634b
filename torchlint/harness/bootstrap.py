"""Runs one training script under instrumentation; the subprocess side of ``torchlint verify``.

    python .../torchlint/harness/bootstrap.py --result-dir DIR --steps N [--seed S] [--seed-offset K]
        [--device D] [--profile-steps P --profile-warmup W] SCRIPT [ARGS...]
    torchrun --nproc_per_node=N .../torchlint/harness/bootstrap.py ... (the same arguments)

The script needs no change. Before running it (``runpy.run_path`` as ``__main__``, with
``sys.argv`` and ``sys.path[0]`` as ``python SCRIPT ARGS`` would set them) this module:

- seeds ``random``, numpy (if installed) and torch, and asks torch for deterministic algorithms
  (``warn_only``, so a script that uses an op without a deterministic kernel still runs); with
  ``--seed-offset K``, every seed the script sets itself (``torch.manual_seed``, ``random.seed``,
  ``numpy.random.seed``, ``torch.Generator().manual_seed``) is shifted by K too: the run is the
  same script under other random numbers, which is how verify measures run-to-run noise (on the
  CPU a rerun under the same seeds repeats the same floats and would measure none);
- on the CPU, maps CUDA calls to the CPU (see ``cuda_mapping``);
- wraps ``torch.autograd.backward`` (which ``Tensor.backward`` calls) to record the scalar being
  backpropagated, unscaled when it came from ``GradScaler.scale``;
- registers a global optimizer step post hook that counts steps, takes the time and the memory
  after each, and raises ``StopTraining`` after N steps. ``StopTraining`` derives from
  ``BaseException`` so that a script's ``except Exception`` does not swallow it; the bootstrap
  catches it, shuts down DataLoader workers and a process group the script left open;
- with ``--profile-steps P``, profiles steps W+1 to W+P under ``torch.profiler`` (see ``profiling``).

Output, in DIR: ``steps.jsonl`` (rank 0), one line per optimizer step, written as the run goes so
that a run that crashes or times out still reports its steps; ``result.rank<R>.json`` per rank at
the end (with ``exception``, the type and message of what stopped the script, for one-line
reasons). The exit status is 0 when the run finished (N steps, or the script ended by itself).

torch is imported inside the functions: the parent process imports this module for its file
names without loading torch, and a missing torch must end as a clean harness error.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import random
import resource
import runpy
import sys
import time
import traceback
import weakref
from pathlib import Path

STEPS_FILE = "steps.jsonl"
RESULT_FILE = "result.rank{rank}.json"
ERROR_TAIL_LINES = 25
SUMMARY_CHARS = 300  # an exception's message in a one-line reason; the traceback tail has all of it
EXIT_FINISHED, EXIT_FAILED, EXIT_HARNESS_ERROR = 0, 1, 3


class StopTraining(BaseException):
    """Raised from the optimizer step hook once the requested number of steps has been taken."""


class HarnessError(Exception):
    """The run could not be set up (no torch, no CUDA for --device cuda): not the script's fault."""


def traceback_tail(error: BaseException) -> str:
    """The end of the traceback, from the script's first frame on (this module's and runpy's
    frames above it say nothing about the script)."""
    frames = error.__traceback__
    while frames is not None and frames.tb_next is not None and \
            frames.tb_frame.f_code.co_filename in (__file__, "<frozen runpy>", runpy.__file__):
        frames = frames.tb_next
    lines = "".join(traceback.format_exception(type(error), error, frames)).splitlines()
    return "\n".join(lines[-ERROR_TAIL_LINES:])


# --- memory ------------------------------------------------------------------------------------

class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
        "keepcost")]


def _mallinfo2():
    try:
        function = ctypes.CDLL(None).mallinfo2  # glibc >= 2.33
    except (OSError, AttributeError):
        return None
    function.restype = _MallInfo2
    return function


class MemoryMeter:
    """What the harness calls memory.

    Peak: the CUDA caching allocator's peak on CUDA, the process's peak RSS (VmHWM) on the CPU.

    Growth is measured on what live objects hold: the bytes the C heap has handed out and not
    taken back (glibc ``mallinfo2``: in-use arena bytes plus mmapped chunks), plus on CUDA the
    bytes the caching allocator has handed out. Unlike RSS, neither counts memory an allocator
    keeps cached after a free, so the sum moves only with what is still alive: tensors, and the
    autograd graph nodes a retained loss keeps (TL101). Those nodes live in host memory even when
    training on a GPU, hence the host heap on CUDA too. Without glibc, current RSS stands in.
    """

    def __init__(self, device: str):
        self.device = device
        self._mallinfo2 = _mallinfo2()
        self.measure = "heap-in-use" if self._mallinfo2 is not None else "rss"
        if device == "cuda":
            self.measure += "+cuda-allocated"

    def current_bytes(self) -> int:
        if self._mallinfo2 is not None:
            info = self._mallinfo2()
            held = info.uordblks + info.hblkhd
        else:
            held = _current_rss_bytes()
        if self.device == "cuda":
            import torch

            held += torch.cuda.memory_allocated()
        return held

    def peak_bytes(self) -> int | None:
        if self.device == "cuda":
            import torch

            return torch.cuda.max_memory_allocated()
        return _peak_rss_bytes()


def _status_field_bytes(field: str) -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024  # reported in kB
    except (OSError, ValueError, IndexError):
        pass
    return None


def _current_rss_bytes() -> int:
    rss = _status_field_bytes("VmRSS")
    return rss if rss is not None else _peak_rss_bytes()


def _peak_rss_bytes() -> int:
    peak = _status_field_bytes("VmHWM")
    if peak is not None:
        return peak
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return maxrss if sys.platform == "darwin" else maxrss * 1024  # bytes on macOS, kB elsewhere


# --- the instrumentation ---------------------------------------------------------------------------

class StepRecorder:
    """Counts optimizer steps, records loss, time and memory per step, stops after ``max_steps``."""

    def __init__(self, max_steps: int, meter: MemoryMeter, steps_file: Path | None, profiler=None):
        self.max_steps = max_steps
        self.meter = meter
        self.profiler = profiler  # a profiling.StepProfiler for --profile-steps, told of every step
        self.steps = 0
        self._steps_file = steps_file.open("w", encoding="utf-8") if steps_file else None
        self._pending_losses: list = []  # detached scalars backpropagated since the last step
        self._last_step_time: float | None = None
        self._scaled_loss: tuple[weakref.ref, object] | None = None  # (GradScaler output, its input)

    def install(self) -> None:
        import torch

        original_backward = torch.autograd.backward
        recorder = self

        def backward(tensors, *args, **kwargs):
            recorder.record_backward(tensors)
            return original_backward(tensors, *args, **kwargs)

        torch.autograd.backward = backward  # Tensor.backward looks it up here at each call

        original_scale = torch.amp.GradScaler.scale

        def scale(scaler, outputs):
            scaled = original_scale(scaler, outputs)
            if isinstance(outputs, torch.Tensor) and scaled is not outputs:
                recorder._scaled_loss = (weakref.ref(scaled), outputs.detach())
            return scaled

        torch.amp.GradScaler.scale = scale
        from torch.optim.optimizer import register_optimizer_step_post_hook

        register_optimizer_step_post_hook(self.after_optimizer_step)

    def record_backward(self, tensors) -> None:
        import torch

        loss = tensors[0] if isinstance(tensors, (list, tuple)) and len(tensors) == 1 else tensors
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            return  # a vector backward (with explicit gradients) has no single loss value
        if self._scaled_loss is not None and self._scaled_loss[0]() is loss:
            loss = self._scaled_loss[1]  # record what the script computed, not loss * scale
        self._pending_losses.append(loss.detach())

    def after_optimizer_step(self, optimizer, args, kwargs) -> None:
        if self.meter.device == "cuda":
            import torch

            torch.cuda.synchronize()  # so the step time covers the GPU work
        now = time.perf_counter()
        self.steps += 1
        losses = [float(loss) for loss in self._pending_losses]
        self._pending_losses.clear()
        record = {
            "step": self.steps,
            # several backward calls per step (gradient accumulation): their mean
            "loss": sum(losses) / len(losses) if losses else None,
            "step_time_s": None if self._last_step_time is None else now - self._last_step_time,
            "memory_bytes": self.meter.current_bytes(),
        }
        self._last_step_time = now
        if self._steps_file is not None:
            self._steps_file.write(json.dumps(record) + "\n")
            self._steps_file.flush()
        if self.profiler is not None:
            self.profiler.after_step(self.steps)
        if self.steps >= self.max_steps:
            raise StopTraining()


def seed_everything(seed: int) -> None:
    import torch

    random.seed(seed)
    try:
        import numpy
    except ImportError:
        pass
    else:
        numpy.random.seed(seed)
    torch.manual_seed(seed)  # seeds every CUDA device too
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False


def shift_script_seeds(offset: int) -> None:
    """Add ``offset`` to every seed the script sets, so that a script that seeds itself (most do)
    still runs under other random numbers. Seeds given as something other than an int (a
    generator's state) are left alone."""
    import torch

    def shift(value):
        return value + offset if isinstance(value, int) and not isinstance(value, bool) else value

    def shifted(seed_function):
        def seed(value=None, *args, **kwargs):
            return seed_function(shift(value), *args, **kwargs)
        return seed

    torch.manual_seed = shifted(torch.manual_seed)
    torch.random.manual_seed = torch.manual_seed
    torch.cuda.manual_seed = shifted(torch.cuda.manual_seed)
    torch.cuda.manual_seed_all = shifted(torch.cuda.manual_seed_all)
    random.seed = shifted(random.seed)
    try:
        import numpy
    except ImportError:
        pass
    else:
        numpy.random.seed = shifted(numpy.random.seed)

    class Generator(torch.Generator):
        def manual_seed(self, seed):
            return super().manual_seed(shift(seed))

    torch.Generator = Generator


def resolve_device(requested: str) -> str:
    import torch

    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cuda" and not torch.cuda.is_available():
        raise HarnessError("--device cuda: CUDA is not available to torch on this machine "
                           f"(torch {torch.__version__}); use --device cpu or auto")
    return requested


def end_dataloader_workers() -> None:
    """Shut down the worker processes of DataLoader iterators that outlive the stopped loop
    (held by the script's globals, or by a DataLoader with persistent workers)."""
    from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter

    gc.collect()
    for obj in gc.get_objects():
        if isinstance(obj, _MultiProcessingDataLoaderIter):
            obj._shutdown_workers()


def world_size_and_close_process_group() -> int:
    """The size of the process group the script formed (1 if none), which is then destroyed."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return 1
    size = dist.get_world_size()
    dist.destroy_process_group()
    return size


def exception_summary(error: BaseException) -> str:
    """``Type: message`` on one line: what a reason quotes. The message's own lines are joined,
    since a traceback's last line is only the last line of a message that has several."""
    message = " ".join(line.strip() for line in str(error).splitlines() if line.strip())
    if len(message) > SUMMARY_CHARS:
        message = message[:SUMMARY_CHARS - 3].rstrip() + "..."
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


def imported_files(script: Path) -> list[str]:
    """The Python files under the script's folder that the run imported (its project's own modules,
    for ``verify --imports``), as paths relative to that folder, the script left out."""
    folder = os.path.realpath(script.parent)
    found = set()
    for module in list(sys.modules.values()):
        filename = getattr(module, "__file__", None)
        if not isinstance(filename, str) or not filename.endswith(".py") or not os.path.isabs(filename):
            continue  # torch._classes says "_classes.py": no file of the folder
        path = os.path.realpath(filename)
        if path.startswith(folder + os.sep) and path != os.path.realpath(script):
            found.add(Path(os.path.relpath(path, folder)).as_posix())
    return sorted(found)


def run(script: Path, script_args: list[str], steps: int, seed: int, device: str, result_dir: Path,
        seed_offset: int = 0, profile_steps: int = 0, profile_warmup: int = 0) -> int:
    rank = int(os.environ.get("RANK", "0"))
    result: dict = {"rank": rank, "finished": False, "stopped_by_harness": False, "steps": 0, "error": None,
                    "exception": None, "harness_error": None, "world_size": 1, "device": None,
                    "cuda_mapped_calls": 0, "peak_memory_bytes": None, "memory_measure": None, "profile": None}
    result_file = result_dir / RESULT_FILE.format(rank=rank)

    def write_result() -> None:
        result_file.write_text(json.dumps(result), encoding="utf-8")

    try:
        import torch  # noqa: F401

        result["device"] = device = resolve_device(device)
    except (ImportError, HarnessError) as error:
        result["harness_error"] = f"{type(error).__name__}: {error}"
        write_result()
        return EXIT_HARNESS_ERROR

    seed_everything(seed)
    if seed_offset:
        shift_script_seeds(seed_offset)
    mapping = None
    if device == "cpu":
        from torchlint.harness import cuda_mapping

        mapping = cuda_mapping.install()
    meter = MemoryMeter(device)
    result["memory_measure"] = meter.measure
    profiler = None
    if profile_steps and rank == 0:
        from torchlint.harness.profiling import StepProfiler

        profiler = StepProfiler(str(script), profile_warmup, profile_steps, device)
    recorder = StepRecorder(steps, meter, result_dir / STEPS_FILE if rank == 0 else None, profiler)
    recorder.install()

    sys.argv = [str(script), *script_args]
    sys.path[0] = str(script.parent)  # as `python SCRIPT` sets it
    try:
        runpy.run_path(str(script), run_name="__main__")
        result["finished"] = True
    except StopTraining:
        result["finished"] = result["stopped_by_harness"] = True
    except SystemExit as exit_:
        result["finished"] = exit_.code in (None, 0)
        if not result["finished"]:
            result["error"] = result["exception"] = f"the script exited with sys.exit({exit_.code!r})"
    except BaseException as error:  # noqa: BLE001 - the script's failure is the result
        result["error"] = traceback_tail(error)
        result["exception"] = exception_summary(error)
    result["steps"] = recorder.steps
    result["imported_files"] = imported_files(script)
    result["profile"] = profiler.summary if profiler else None
    result["cuda_mapped_calls"] = mapping.mapped_calls if mapping else 0
    result["peak_memory_bytes"] = meter.peak_bytes()
    try:
        end_dataloader_workers()
        result["world_size"] = world_size_and_close_process_group()
    except Exception as error:  # noqa: BLE001 - report, do not hide the run's own result
        result["error"] = result["error"] or f"cleaning up after the run: {traceback_tail(error)}"
        result["finished"] = False
    write_result()
    return EXIT_FINISHED if result["finished"] else EXIT_FAILED


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bootstrap.py", description=__doc__.split("\n")[0])
    parser.add_argument("--result-dir", type=Path, required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--seed-offset", type=int, default=0)
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--profile-steps", type=int, default=0)
    parser.add_argument("--profile-warmup", type=int, default=0)
    parser.add_argument("script", type=Path)
    parser.add_argument("script_args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    script_args = args.script_args[1:] if args.script_args[:1] == ["--"] else args.script_args
    result_dir = args.result_dir.resolve()  # the script may change the working directory
    result_dir.mkdir(parents=True, exist_ok=True)
    return run(args.script.resolve(), script_args, args.steps, args.seed, args.device, result_dir,
               seed_offset=args.seed_offset, profile_steps=args.profile_steps, profile_warmup=args.profile_warmup)


if __name__ == "__main__":
    # Run as a file, so that neither this folder nor torchlint's (with an editable install, a whole
    # repository) is on the script's path: the package is imported from here once, its modules are
    # found through it from then on, and sys.path[0] is the script's folder, where the run starts.
    sys.path[0] = str(Path(__file__).resolve().parents[2])
    import torchlint.harness  # noqa: F401
    sys.path[0] = os.getcwd()
    sys.exit(main())
