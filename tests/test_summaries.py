"""Function summaries (torchlint/analysis): small programs -> the exact facts one call of a
function has, with its callees' (in the file and in the project's other modules) included.

Each row writes its files to a temporary project, asks about one call (``callee`` written in
``scope``) or one function, and compares every fact, rendered one per line as
``kind file:line what ... via file:line what``, with the expected lines.
"""

from __future__ import annotations

import ast
import json
import pickle
import textwrap
from pathlib import Path

import pytest

from torchlint.analysis.function_facts import summarize_module
from torchlint.analysis.project import ProjectModules
from torchlint.analysis.summaries import Effect, FunctionSummary, ModuleSummary, Operand


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")


def where(effect: Effect, root: Path) -> str:
    return f"{Path(effect.path).relative_to(root)}:{effect.line} {effect.what}"


def via(effect: Effect, root: Path) -> str:
    return "".join(f" via {where(hop, root)}" for hop in effect.via)


def value(op: Operand) -> str:
    text = f"parameter {op.index} {op.name}" if op.kind == "parameter" else op.kind
    return text if op.graph else f"{text} (detached)"


def facts(summary: FunctionSummary, root: Path) -> list[str]:
    """Every fact of a summary, one line each."""
    lines = [f"sync {where(s.effect, root)} ({s.how}) reads {', '.join(map(value, s.reads))}{via(s.effect, root)}"
             for s in summary.host_syncs]
    lines += [f"clears {where(e, root)}{via(e, root)}" for e in summary.clears_cache]
    lines += [f"keeps {value(k.value)} {'with' if k.with_graph else 'without'} graph in {k.into} ({k.how}, "
              f"held by {value(k.holder)}) at {where(k.effect, root)}{via(k.effect, root)}" for k in summary.keeps]
    lines += [f"forward {where(e, root)}{via(e, root)}" for e in summary.forwards_with_grad]
    lines += [f"backward {where(e, root)}{via(e, root)}" for e in summary.backward]
    lines += [f"autograd {where(e, root)}{via(e, root)}" for e in summary.autograd]
    lines += [f"mode {m.receiver} {m.mode} at {where(m.effect, root)}{via(m.effect, root)}" for m in summary.mode_calls]
    lines += [f"returns {value(op)}" for op in summary.returns_parameters]
    forward = summary.returns_forward
    if forward is not None:
        lines.append(f"returns forward {where(forward, root)}{via(forward, root)}")
    layer = summary.returns_layer
    if layer is not None:
        bias = layer.bias if layer.parameter is None else f"{layer.bias} {value(layer.parameter)}"
        lines.append(f"returns layer {layer.kind} bias={bias} at {where(layer.effect, root)}{via(layer.effect, root)}")
    for attribute, built in summary.self_layers.items():
        bias = built.bias if built.parameter is None else f"{built.bias} {value(built.parameter)}"
        lines.append(f"self.{attribute} layer {built.kind} bias={bias} at {where(built.effect, root)}")
    factory = summary.returns_factory
    if factory is not None:
        lines.append(f"returns factory {factory.name}{' (random)' if factory.random else ''} at "
                     f"{where(factory.effect, root)}{via(factory.effect, root)}")
    if summary.builds:
        lines.append(f"builds {', '.join(summary.builds)}")
    lines += [f"convolution {c.dimension}d at {where(c.effect, root)}{via(c.effect, root)}"
              for c in summary.convolutions]
    if summary.grad_mode is not None:
        lines.append(f"grad {summary.grad_mode}")
    return lines


def ask(root: Path, query: tuple) -> FunctionSummary | None:
    summaries = ProjectModules(root).summaries
    if len(query) == 2:
        return summaries.function(str(root / query[0]), query[1])
    return summaries.resolve_call(str(root / query[0]), query[1], query[2])


ROWS = []


def row(name: str, files: dict[str, str] | str, query: tuple, expected: list[str] | None) -> None:
    ROWS.append(pytest.param({"train.py": files} if isinstance(files, str) else files, query, expected, id=name))


# --- host syncs ---

row("direct-sync", """
    def log_step(loss):
        return loss.item()
    """, ("train.py", "log_step", None), ["sync train.py:2 loss.item() (method) reads parameter 0 loss"])

row("sync-on-parameter-vs-python-number", """
    def report(loss, count: int):
        a = float(loss)
        b = float(count)
        n = len(loss)
        print(n, f"{n}")
        v = loss.item()
        print("loss %.3f" % v)

    def fit(model, x):
        report(3.0, 1)
        report(model(x), 1)
    """, ("train.py", "fit"), [
        "sync train.py:2 float(loss) (conversion) reads tensor via train.py:11 report(...)",
        "sync train.py:6 loss.item() (method) reads tensor via train.py:11 report(...)",
        "forward train.py:11 model(x)",
    ])

row("sync-only-if-a-tensor", """
    import torch

    def learning_rate(scheduler):
        lr = scheduler.get_last_lr()[0]
        if torch.is_tensor(lr):
            lr = lr.item()
        if isinstance(lr, torch.Tensor):
            return float(lr)
        return lr
    """, ("train.py", "learning_rate", None), [
        # kept as a read where the value is a tensor only: the caller decides whether it is one
        "sync train.py:6 lr.item() (guarded) reads parameter 0 scheduler",
    ])

row("formatting-and-printing-a-tensor", """
    import torch

    def show(model, x):
        out = model(x)
        print(out)
        print(f"{out.mean():.3f}")
        "{}".format(out)
        msg = "%s" % (out,)
        torch.cuda.synchronize()
        out.cpu()
        out.cpu().numpy()
        out.tolist()
    """, ("train.py", "show"), [
        "sync train.py:5 print(out) (print) reads tensor",
        "sync train.py:6 f\"{out.mean():.3f}\" (format) reads tensor",
        "sync train.py:7 \"{}\".format(out) (format) reads tensor",
        "sync train.py:8 \"%s\" % (out,) (format) reads tensor",
        "sync train.py:9 torch.cuda.synchronize() (synchronize) reads device",
        "sync train.py:10 out.cpu() (method) reads tensor",
        "sync train.py:11 out.cpu() (method) reads tensor",
        "sync train.py:12 out.tolist() (method) reads tensor",
        "forward train.py:4 model(x)",
    ])

row("periodic-sync-not-counted", """
    import torch

    def log_step(loss, step, log_now):
        if step % 100 == 0:
            print(loss.item())
        if log_now:
            torch.cuda.empty_cache()
        if not log_now:
            print(loss.item())
        try:
            pass
        except RuntimeError:
            print(loss.item())
        return
        print(loss.item())

    def fit(loss, step):
        if step % 10 == 0:
            show(loss)
        else:
            show(loss.detach())

    def show(x):
        print(x)
    """, ("train.py", "fit"),
    ["sync train.py:24 print(x) (print) reads parameter 0 loss (detached) via train.py:21 show(...)"])

row("periodic-helper-itself", ROWS[-1].values[0], ("train.py", "log_step"), [])

row("recursion", """
    def walk(x, n):
        if n > 0:
            return walk(x, n - 1)
        return x.item()
    """, ("train.py", "walk"), ["sync train.py:4 x.item() (method) reads parameter 0 x"])

row("mutual-recursion", """
    import torch

    def ping(x, n):
        if n:
            pong(x, n - 1)
        print(x)

    def pong(y, n):
        ping(y, n)
        torch.cuda.empty_cache()
    """, ("train.py", "pong"), [
        "sync train.py:6 print(x) (print) reads parameter 0 y via train.py:9 ping(...)",
        "clears train.py:10 torch.cuda.empty_cache()",
    ])

row("cycle-across-two-files", {
    "a.py": """
        from b import g

        def f(x):
            g(x)
            return x.item()
        """,
    "b.py": """
        import torch
        from a import f

        def g(y):
            f(y)
            torch.cuda.empty_cache()
        """,
}, ("a.py", "f"), [
    "sync a.py:5 x.item() (method) reads parameter 0 x",
    "clears b.py:6 torch.cuda.empty_cache() via a.py:4 g(...)",
])

# --- how calls resolve ---

row("self-method-and-base-class", """
    class Base:
        def log(self, value):
            print(value.item())

    class Trainer(Base):
        def fit(self, loss):
            self.log(loss)
    """, ("train.py", "self.log", "Trainer.fit"), ["sync train.py:3 value.item() (method) reads parameter 1 value"])

INSTANCES = """
    class Meter:
        def update(self, val):
            self.last = val.item()

    meter = Meter()

    def fit(loss):
        local = Meter()
        local.update(loss)

    def report(loss):
        meter.update(loss)
    """
row("instance-bound-in-the-scope", INSTANCES, ("train.py", "fit"),
    ["sync train.py:3 val.item() (method) reads parameter 0 loss via train.py:9 local.update(...)"])
row("instance-bound-at-module-level", INSTANCES, ("train.py", "meter.update", "report"),
    ["sync train.py:3 val.item() (method) reads parameter 1 val"])

row("self-attribute-bound-to-a-class", """
    class Meter:
        def update(self, val, n=1):
            self.sum += val * n

    class Trainer:
        def __init__(self):
            self.meter = Meter()

        def step(self, loss):
            self.meter.update(loss)
    """, ("train.py", "Trainer.step"), [
        "keeps parameter 1 loss with graph in self.sum (augment, held by parameter 0 self) at "
        "train.py:3 self.sum += val * n via train.py:10 self.meter.update(...)",
    ])

row("bound-method-aliases", """
    import torch

    class Meter:
        def update(self, val):
            print(val)

    class Trainer:
        def train_step(self, batch):
            torch.cuda.empty_cache()

        def fit(self, loader, loss):
            meter = Meter()
            step = self.train_step
            log = meter.update
            for batch in loader:
                step(batch)
                log(loss)
    """, ("train.py", "Trainer.fit"), [
        "sync train.py:5 print(val) (print) reads parameter 2 loss via train.py:17 log(...)",
        "clears train.py:9 torch.cuda.empty_cache() via train.py:16 step(...)",
    ])

row("name-bound-twice-is-unknown", """
    def a(x):
        x.item()

    def b(x):
        pass

    def fit(x, flag):
        step = a
        if flag:
            step = b
        step(x)
    """, ("train.py", "step", "fit"), None)

row("parameter-shadows-a-function", """
    def log_step(x):
        x.item()

    def fit(x, log_step):
        log_step(x)
    """, ("train.py", "log_step", "fit"), None)

row("static-and-class-methods-bind-their-arguments", """
    class Logger:
        @staticmethod
        def show(value):
            print(value)

        @classmethod
        def make(cls, value, scale=1.0):
            return float(value * scale)

        def log(self, value):
            self.show(value)
            Logger.show(value)
            self.make(scale=2.0, value=value)
    """, ("train.py", "Logger.log"), [
        "sync train.py:4 print(value) (print) reads parameter 1 value via train.py:11 self.show(...)",
        "sync train.py:8 float(value * scale) (conversion) reads parameter 1 value via train.py:13 self.make(...)",
    ])

row("annotated-parameter-is-an-instance", """
    class Meter:
        def update(self, val):
            return val.item()

    def fit(meter: Meter, loss):
        meter.update(loss)
    """, ("train.py", "meter.update", "fit"), ["sync train.py:3 val.item() (method) reads parameter 1 val"])

row("calling-an-instance-runs-forward", """
    import torch.nn as nn

    class Net(nn.Module):
        def forward(self, x):
            print(x.shape, x.sum().item())
            return x

    class Trainer:
        def __init__(self):
            self.net = Net()

        def step(self, x):
            return self.net(x)
    """, ("train.py", "Trainer.step"), [
        "sync train.py:5 x.sum().item() (method) reads parameter 1 x via train.py:13 self.net(...)",
        "forward train.py:13 self.net(x)",
        "returns forward train.py:13 self.net(x)",
    ])

row("nested-function", """
    def outer(x):
        def inner(y):
            return y.item()
        return inner(x)
    """, ("train.py", "outer"), ["sync train.py:3 y.item() (method) reads parameter 0 x via train.py:4 inner(...)"])

# --- the project's modules ---

PROJECT = {
    "utils.py": """
        import torch

        def log_step(loss):
            print(f"loss {loss}")

        def free_memory():
            torch.cuda.empty_cache()
        """,
    "pkg/__init__.py": """
        from .meters import AverageMeter
        """,
    "pkg/meters.py": """
        class AverageMeter:
            def update(self, val, n=1):
                self.sum += val * n
        """,
    "pkg/engine.py": """
        from .meters import AverageMeter
        from . import meters

        def track(loss):
            AverageMeter().update(loss)
            m = meters.AverageMeter()
            m.update(loss)
        """,
    "train.py": """
        import numpy as np
        import utils as U
        from utils import log_step
        from pkg import AverageMeter
        from missing_module import helper

        meter = AverageMeter()

        def fit(model, x):
            loss = model(x)
            log_step(loss)
            U.free_memory()
            meter.update(loss)
            helper(loss)
            np.mean(loss)
        """,
}

row("absolute-import", PROJECT, ("train.py", "log_step", "fit"),
    ["sync utils.py:4 f\"loss {loss}\" (format) reads parameter 0 loss"])
row("import-as", PROJECT, ("train.py", "U.free_memory", "fit"), ["clears utils.py:7 torch.cuda.empty_cache()"])
METER_UPDATE = [
    "keeps parameter 1 val with graph in self.sum (augment, held by parameter 0 self) at "
    "pkg/meters.py:3 self.sum += val * n",
    "keeps parameter 2 n with graph in self.sum (augment, held by parameter 0 self) at "
    "pkg/meters.py:3 self.sum += val * n",
]
row("package-init-re-export", PROJECT, ("train.py", "meter.update", "fit"), METER_UPDATE)
row("relative-import", PROJECT, ("pkg/engine.py", "m.update", "track"), METER_UPDATE)
# what a meter made inside the call keeps dies with it
row("kept-in-a-local-object-is-not-kept", PROJECT, ("pkg/engine.py", "track"), [])
row("dotted-module-import-and-star-import", {
    **PROJECT,
    "script.py": """
        import pkg.meters
        from utils import *

        def run(loss):
            pkg.meters.AverageMeter().update(loss)
            log_step(loss)
        """,
}, ("script.py", "run"),
    ["sync utils.py:4 f\"loss {loss}\" (format) reads parameter 0 loss via script.py:6 log_step(...)"])
row("a-model-class-of-another-module", {
    "models.py": """
        from torch import nn

        class Block(nn.Module):
            def __init__(self, c):
                super().__init__()
                self.conv = nn.Conv2d(c, c, 3)
                self.bn = nn.BatchNorm2d(c)

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.blocks = nn.Sequential(Block(3), Block(3))
        """,
    "train.py": """
        from models import *

        def main():
            model = Net()
        """,
}, ("train.py", "Net", "main"), ["builds BatchNorm2d, Conv2d, Sequential",
                                  "convolution 2d at models.py:6 nn.Conv2d(c, c, 3) via models.py:12 Block(...)"])
row("unresolvable-import", PROJECT, ("train.py", "helper", "fit"), None)
row("third-party-import", PROJECT, ("train.py", "np.mean", "fit"), None)
row("everything-through-the-imports", PROJECT, ("train.py", "fit"), [
    "sync utils.py:4 f\"loss {loss}\" (format) reads tensor via train.py:11 log_step(...)",
    "clears utils.py:7 torch.cuda.empty_cache() via train.py:12 U.free_memory()",
    "keeps tensor with graph in self.sum (augment, held by global) at pkg/meters.py:3 self.sum += val * n "
    "via train.py:13 meter.update(...)",
    "forward train.py:10 model(x)",
])

# --- values kept past the call ---

METERS = """
    class WithGraph:
        def update(self, val, n=1):
            self.sum += val * n
            self.history.append(val)

    class Detached:
        def update(self, val, n=1):
            self.sum += val.item() * n
            self.history.append(val.detach())
            self.last = val.cpu().numpy()
    """
row("meter-keeps-val-with-its-graph", METERS, ("train.py", "WithGraph.update"), [
    "keeps parameter 1 val with graph in self.sum (augment, held by parameter 0 self) at "
    "train.py:3 self.sum += val * n",
    "keeps parameter 2 n with graph in self.sum (augment, held by parameter 0 self) at "
    "train.py:3 self.sum += val * n",
    "keeps parameter 1 val with graph in self.history (append, held by parameter 0 self) at "
    "train.py:4 self.history.append(val)",
])
row("meter-keeps-val-item", METERS, ("train.py", "Detached.update"), [
    "sync train.py:8 val.item() (method) reads parameter 1 val",
    "sync train.py:10 val.cpu() (method) reads parameter 1 val",
    "keeps parameter 2 n with graph in self.sum (augment, held by parameter 0 self) at "
    "train.py:8 self.sum += val.item() * n",
    "keeps parameter 1 val (detached) without graph in self.history (append, held by parameter 0 self) at "
    "train.py:9 self.history.append(val.detach())",
])

row("in-place-accumulation", """
    import torch

    class Totals:
        def update(self, loss, p):
            self.total.add_(loss)
            with torch.no_grad():
                self.ema.mul_(0.9).add_(p, alpha=0.1)
    """, ("train.py", "Totals.update"), [
        "keeps parameter 1 loss with graph in self.total (augment, held by parameter 0 self) at "
        "train.py:5 self.total.add_(loss)",
        "keeps parameter 2 p (detached) without graph in self.ema (augment, held by parameter 0 self) at "
        "train.py:7 self.ema.mul_(0.9).add_(p, alpha=0.1)",
    ])

row("kept-in-a-module-container-and-a-parameter", """
    import torch

    HISTORY = []

    def remember(loss, store, model, x):
        HISTORY.append(loss)
        store["loss"] = loss
        local = []
        local.append(loss)
        with torch.no_grad():
            store["out"] = model(x)

    def fit(model, x, logs):
        out = model(x)
        remember(out, logs, model, x)
    """, ("train.py", "fit"), [
        "keeps tensor with graph in HISTORY (append, held by global) at train.py:6 HISTORY.append(loss) "
        "via train.py:15 remember(...)",
        "keeps tensor with graph in store (item, held by parameter 2 logs) at train.py:7 store[\"loss\"] = loss "
        "via train.py:15 remember(...)",
        "keeps tensor (detached) without graph in store (item, held by parameter 2 logs) at "
        "train.py:11 store[\"out\"] = model(x) via train.py:15 remember(...)",
        "forward train.py:14 model(x)",
    ])

# --- layers and factories returned ---

LAYERS = """
    import torch.nn as nn
    from torch import nn as tnn
    from torch.nn import Conv2d

    def conv3x3(a, b, stride=1):
        return nn.Conv2d(a, b, 3, stride, 1)

    def conv1x1(a, b):
        return tnn.Conv2d(a, b, 1, bias=False)

    def conv(a, b, bias=True):
        layer = Conv2d(a, b, 3, bias=bias)
        return layer

    def head(a, b):
        return nn.Sequential(nn.ReLU(), nn.Linear(a, b))

    def block(c):
        return conv(c, c, bias=False)

    def stem(c, use_bias):
        return nn.Sequential(nn.ReLU(), conv(c, c, use_bias))

    def maybe(c, big):
        if big:
            return conv3x3(c, c)
        return nn.ReLU()
    """
row("conv3x3-bias-default", LAYERS, ("train.py", "conv3x3"),
    ["returns layer Conv2d bias=default at train.py:6 nn.Conv2d(a, b, 3, stride, 1)", "builds Conv2d",
     "convolution 2d at train.py:6 nn.Conv2d(a, b, 3, stride, 1)"])
row("conv1x1-bias-false", LAYERS, ("train.py", "conv1x1"),
    ["returns layer Conv2d bias=False at train.py:9 tnn.Conv2d(a, b, 1, bias=False)", "builds Conv2d",
     "convolution 2d at train.py:9 tnn.Conv2d(a, b, 1, bias=False)"])
row("conv-bias-from-a-parameter", LAYERS, ("train.py", "conv"),
    ["returns layer Conv2d bias=parameter parameter 2 bias at train.py:12 Conv2d(a, b, 3, bias=bias)",
     "builds Conv2d", "convolution 2d at train.py:12 Conv2d(a, b, 3, bias=bias)"])
row("sequential-ending-in-linear", LAYERS, ("train.py", "head"),
    ["returns layer Linear bias=default at train.py:16 nn.Linear(a, b)", "builds Linear, ReLU, Sequential"])
row("layer-through-a-helper", LAYERS, ("train.py", "block"),
    ["returns layer Conv2d bias=False at train.py:12 Conv2d(a, b, 3, bias=bias) via train.py:19 conv(...)",
     "builds Conv2d", "convolution 2d at train.py:12 Conv2d(a, b, 3, bias=bias) via train.py:19 conv(...)"])
row("sequential-ending-in-a-helper", LAYERS, ("train.py", "stem"), [
    "returns layer Conv2d bias=parameter parameter 1 use_bias at train.py:12 Conv2d(a, b, 3, bias=bias) "
    "via train.py:22 conv(...)",
    "builds Conv2d, ReLU, Sequential",
    "convolution 2d at train.py:12 Conv2d(a, b, 3, bias=bias) via train.py:22 conv(...)",
])
row("layer-on-one-path-only", LAYERS, ("train.py", "maybe"), [
    "builds Conv2d, ReLU", "convolution 2d at train.py:6 nn.Conv2d(a, b, 3, stride, 1) via train.py:26 conv3x3(...)"])

row("layers-assigned-to-self-once", """
    import torch.nn as nn

    class ConvNorm(nn.Module):
        def __init__(self, c, bias=True, wide=False):
            super().__init__()
            self.conv = nn.Conv1d(c, c, 5, bias=bias)
            head = nn.Sequential(nn.ReLU(), nn.Linear(c, c))
            self.head = head
            self.either = nn.Conv1d(c, c, 3)
            if wide:
                self.either = nn.Conv1d(c, c, 5)
            self.act = nn.ReLU()
    """, ("train.py", "ConvNorm.__init__"), [
    "self.conv layer Conv1d bias=parameter parameter 2 bias at train.py:6 nn.Conv1d(c, c, 5, bias=bias)",
    "self.head layer Linear bias=default at train.py:7 nn.Linear(c, c)",
    "builds Conv1d, Linear, ReLU, Sequential",
    "convolution 1d at train.py:6 nn.Conv1d(c, c, 5, bias=bias)",
])

row("convolutions-one-of-each-dimension", """
    import torch.nn as nn
    from torch.nn import ConvTranspose3d
    from torchvision import models

    def layers1d():
        # nn.Conv1d in a comment, and "nn.Conv1d(1, 1, 1)" in a string, build nothing
        return nn.Sequential(nn.LazyConv1d(8, 3), nn.Conv1d(8, 8, 3))

    def build():
        stem = layers1d()
        backbone = models.resnet18()
        head = nn.Conv2d(8, 8, 1)
        return ConvTranspose3d(8, 1, 2)
    """, ("train.py", "build"), [
        "builds Conv1d, Conv2d, ConvTranspose3d, LazyConv1d, Sequential",
        "convolution 1d at train.py:7 nn.LazyConv1d(8, 3) via train.py:10 layers1d()",
        "convolution 2d at train.py:11 models.resnet18()",
        "convolution 3d at train.py:13 ConvTranspose3d(8, 1, 2)",
    ])

row("factories", """
    import torch

    def make_mask(n):
        m = torch.ones(n)
        m[0] = 0
        return m

    def noise(n):
        return torch.randn(n, 3)

    def placed(n, device):
        return torch.zeros(n, device=device)

    def moved(n):
        x = torch.zeros(n)
        x = x.cuda()
        return x

    def like(t):
        return torch.zeros_like(t)

    def wrapper(n):
        return noise(n)
    """, ("train.py", "make_mask"), ["returns factory ones at train.py:4 torch.ones(n)"])
for _name, _expected in (("noise", ["returns factory randn (random) at train.py:9 torch.randn(n, 3)"]),
                         ("placed", []), ("moved", []), ("like", []),
                         ("wrapper", ["returns factory randn (random) at train.py:9 torch.randn(n, 3) "
                                      "via train.py:23 noise(...)"])):
    row(f"factory-{_name}", ROWS[-1].values[0], ("train.py", _name), _expected)

# --- grad mode, forwards, backward, modes ---

GRAD = """
    import torch
    from torch import no_grad

    @torch.no_grad()
    def predict(model, x):
        return model(x)

    def predict_block(self_model, x):
        with torch.inference_mode():
            return self_model(x)

    @no_grad
    def sample(generator, z):
        return generator(z)

    def run(net, x):
        return net(x)

    def evaluate(model, x):
        predict(model, x)
        with torch.no_grad():
            run(model, x)
        return run(model, x)

    @torch.enable_grad()
    def attack(x):
        x.requires_grad_()
        return torch.autograd.grad(x.sum(), x)
    """
row("no-grad-decorator", GRAD, ("train.py", "predict"), ["grad disabled"])
row("no-grad-block", GRAD, ("train.py", "predict_block"), ["grad disabled"])
row("no-grad-bare-decorator", GRAD, ("train.py", "sample"), ["grad disabled"])
row("forward-with-grad", GRAD, ("train.py", "run"),
    ["forward train.py:17 net(x)", "returns forward train.py:17 net(x)"])
row("no-grad-cuts-forwards-of-callees", GRAD, ("train.py", "evaluate"), [
    "forward train.py:17 net(x) via train.py:23 run(...)",
    "returns forward train.py:17 net(x) via train.py:23 run(...)",
])
row("enable-grad-and-autograd", GRAD, ("train.py", "attack"), [
    "autograd train.py:25 torch.enable_grad()",
    "autograd train.py:27 x.requires_grad_()",
    "autograd train.py:28 torch.autograd.grad(x.sum(), x)",
    "returns parameter 0 x",
    "grad enabled",
])

row("no-grad-with-torch-imported-again-with-submodules", """
    import torch
    import torch.nn.parallel
    import torch.utils.data

    def net_process(model, image):
        with torch.no_grad():
            output = model(image)
        return output
    """, ("train.py", "net_process"), [])  # `import torch.nn.parallel` binds `torch` to the same module again

SWITCHES = """
    import torch

    @torch.set_grad_enabled(False)
    def frozen(model, x):
        return model(x)

    def switched(model, x):
        torch.set_grad_enabled(False)
        out = model(x)
        torch.set_grad_enabled(True)
        return model(out)

    def either(model, x, train):
        with torch.set_grad_enabled(train):
            return model(x)
    """
row("set-grad-enabled-decorator", SWITCHES, ("train.py", "frozen"), ["grad disabled"])
row("set-grad-enabled-statements", SWITCHES, ("train.py", "switched"),
    ["forward train.py:11 model(out)", "returns forward train.py:11 model(out)"])
row("grad-mode-unknown-is-not-on", SWITCHES, ("train.py", "either"), [])

row("backward-through-a-callee", """
    def train_step(model, batch, opt, scaler):
        loss = model(batch).mean()
        scaler.scale(loss).backward()
        opt.step()
        return loss.detach()

    def train_epoch(model, loader, opt, scaler):
        for batch in loader:
            loss = train_step(model, batch, opt, scaler)
        return loss
    """, ("train.py", "train_epoch"), [
        "forward train.py:2 model(batch) via train.py:9 train_step(...)",
        "backward train.py:3 scaler.scale(loss).backward() via train.py:9 train_step(...)",
    ])

row("mode-calls", """
    def evaluate(net, loader):
        net.eval()
        for x in loader:
            net(x)

    def fit(model, loader):
        model.train()
        evaluate(model, loader)
        model.module.train(False)
    """, ("train.py", "fit"), [
        "forward train.py:4 net(x) via train.py:8 evaluate(...)",
        "mode model eval at train.py:2 net.eval() via train.py:8 evaluate(...)",
        "mode model.module eval at train.py:9 model.module.train(False)",
    ])

row("returns-forward-loss", """
    def compute_loss(model, x, y, criterion):
        out = model(x)
        loss = criterion(out, y)
        return loss

    def step(model, x, y, criterion):
        return compute_loss(model, x, y, criterion)
    """, ("train.py", "step"), [
        "forward train.py:2 model(x) via train.py:7 compute_loss(...)",
        "returns parameter 2 y",
        "returns forward train.py:2 model(x) via train.py:7 compute_loss(...)",
    ])


@pytest.mark.parametrize("files, query, expected", ROWS)
def test_summary_facts(tmp_path, files, query, expected):
    write(tmp_path, files)
    summary = ask(tmp_path, query)
    if expected is None:
        assert summary is None
    else:
        assert summary is not None
        assert facts(summary, tmp_path) == expected


# --- finding the project's modules ---

def test_imports_resolve_like_ruff(tmp_path):
    write(tmp_path, {
        "utils.py": "",
        "scripts/train.py": "",
        "scripts/helpers.py": "",
        "src/mypkg/__init__.py": "",
        "src/mypkg/loop/__init__.py": "",
        "src/mypkg/loop/run.py": "",
        "src/mypkg/models.py": "",
        "lib/extra.py": "",
    })
    modules = ProjectModules(tmp_path, src=[Path("lib")])
    run = str(tmp_path / "src/mypkg/loop/run.py")
    train = str(tmp_path / "scripts/train.py")
    found = {
        "script's folder": modules.resolve_import(train, "helpers", 0),
        "project root": modules.resolve_import(train, "utils", 0),
        "package root": modules.resolve_import(run, "mypkg.models", 0),
        "package": modules.resolve_import(run, "mypkg", 0),
        "src root": modules.resolve_import(train, "extra", 0),
        "relative": modules.resolve_import(run, "models", 2),
        "relative package": modules.resolve_import(run, "", 1),
        "not the project's": modules.resolve_import(train, "torch.nn", 0),
        "above the root": modules.resolve_import(run, "x", 6),
    }
    assert {name: path and Path(path).relative_to(tmp_path).as_posix() for name, path in found.items()} == {
        "script's folder": "scripts/helpers.py",
        "project root": "utils.py",
        "package root": "src/mypkg/models.py",
        "package": "src/mypkg/__init__.py",
        "src root": "lib/extra.py",
        "relative": "src/mypkg/models.py",
        "relative package": "src/mypkg/loop/__init__.py",
        "not the project's": None,
        "above the root": None,
    }


def test_imports_of_a_namespace_package_from_inside_it(tmp_path):
    """``import basicsr.models.srgan`` in basicsr/models/real.py where basicsr/ has no
    ``__init__.py`` (a namespace package): the folder above the ``basicsr`` that holds the file."""
    write(tmp_path, {
        "repo/basicsr/models/__init__.py": "",
        "repo/basicsr/models/srgan.py": "",
        "repo/basicsr/models/real.py": "",
        "repo/basicsr/utils/misc.py": "",
        "other/models/x.py": "",
    })
    modules = ProjectModules(tmp_path)
    real = str(tmp_path / "repo/basicsr/models/real.py")
    found = {
        "sibling module": modules.resolve_import(real, "basicsr.models.srgan", 0),
        "other subpackage": modules.resolve_import(real, "basicsr.utils.misc", 0),
        "no folder of that name around": modules.resolve_import(real, "repo2.basicsr.models.srgan", 0),
        "not there": modules.resolve_import(real, "basicsr.models.missing", 0),
    }
    assert {name: path and Path(path).relative_to(tmp_path).as_posix() for name, path in found.items()} == {
        "sibling module": "repo/basicsr/models/srgan.py",
        "other subpackage": "repo/basicsr/utils/misc.py",
        "no folder of that name around": None,
        "not there": None,
    }


def test_a_module_that_is_no_package_has_no_modules(tmp_path):
    """`from utils import helper` where utils.py is a plain module: `helper` is one of its names or
    nothing, never utils/helper.py beside it (Python raises ImportError); a package's is its module."""
    write(tmp_path, {"utils.py": "x = 1\n", "utils/helper.py": "def f(t):\n    t.item()\n",
                     "pkg/__init__.py": "", "pkg/helper.py": "def f(t):\n    t.item()\n",
                     "train.py": "from utils import helper\nfrom pkg import helper as ok\n"})
    summaries = ProjectModules(tmp_path).summaries
    assert summaries.resolve_call(str(tmp_path / "train.py"), "helper.f", None) is None
    assert summaries.resolve_call(str(tmp_path / "train.py"), "ok.f", None) is not None


def test_first_root_wins(tmp_path):
    write(tmp_path, {"utils.py": "def helper(x):\n    x.item()\n", "scripts/utils.py": "def helper(x):\n    pass\n",
                     "scripts/train.py": "from utils import helper\n\ndef f(x):\n    helper(x)\n"})
    summary = ProjectModules(tmp_path).summaries.resolve_call(str(tmp_path / "scripts/train.py"), "helper", "f")
    assert Path(summary.path) == tmp_path / "scripts/utils.py"
    assert summary.host_syncs == ()


# --- what a file's answers depend on; caches ---

def test_dependencies_change_with_an_imported_file(tmp_path):
    write(tmp_path, PROJECT)
    train = tmp_path / "train.py"
    modules = ProjectModules(tmp_path)
    assert modules.dependencies(train) == []
    log_step = modules.summaries.resolve_call(str(train), "log_step", "fit")
    assert facts(log_step, tmp_path) == ['sync utils.py:4 f"loss {loss}" (format) reads parameter 0 loss']
    before = modules.dependencies(train)
    assert [path.relative_to(tmp_path).as_posix() for path, _ in before] == ["utils.py"]
    modules.summaries.resolve_call(str(train), "meter.update", "fit")
    assert [path.relative_to(tmp_path).as_posix() for path, _ in modules.dependencies(train)] == [
        "pkg/__init__.py", "pkg/meters.py", "utils.py"]

    (tmp_path / "utils.py").write_text("def log_step(loss):\n    return loss.detach()\n", encoding="utf-8")
    assert modules.refresh() == [str(tmp_path / "utils.py")]
    log_step = modules.summaries.resolve_call(str(train), "log_step", "fit")
    assert facts(log_step, tmp_path) == []
    after = modules.dependencies(train)
    assert after[-1][0] == before[0][0] and after[-1][1] != before[0][1]
    assert modules.refresh() == []


def test_transitive_summaries_follow_a_change_two_files_away(tmp_path):
    write(tmp_path, {"a.py": "from b import g\n\ndef f(x):\n    g(x)\n",
                     "b.py": "from c import h\n\ndef g(x):\n    h(x)\n",
                     "c.py": "def h(x):\n    x.item()\n"})
    modules = ProjectModules(tmp_path)
    assert len(modules.summaries.function(str(tmp_path / "a.py"), "f").host_syncs) == 1
    assert [p.name for p, _ in modules.dependencies(tmp_path / "a.py")] == ["b.py", "c.py"]
    (tmp_path / "c.py").write_text("def h(x):\n    pass\n", encoding="utf-8")
    modules.refresh()
    assert modules.summaries.function(str(tmp_path / "a.py"), "f").host_syncs == ()


def test_a_buffer_given_for_a_file_replaces_its_disk_text(tmp_path):
    write(tmp_path, {"utils.py": "def log(x):\n    pass\n",
                     "train.py": "from utils import log\n\ndef f(x):\n    log(x)\n"})
    modules = ProjectModules(tmp_path)
    assert modules.summaries.function(str(tmp_path / "train.py"), "f").host_syncs == ()
    modules.use_source(str(tmp_path / "utils.py"), "def log(x):\n    print(x.item())\n")
    assert len(modules.summaries.function(str(tmp_path / "train.py"), "f").host_syncs) == 1


def test_an_edited_buffer_is_summarized_once_per_lint(tmp_path, monkeypatch):
    """The language server lints a buffer that differs from the file on disk: the prechecks
    summarize it from the tree they parsed, and the rules' walk asks the same summary (it used to be
    forgotten after the prechecks and parsed again whole for the walk's first question). After the
    lint, the disk's text answers again."""
    from torchlint import engine
    from torchlint.config import resolve_settings
    import torchlint.analysis.project as project

    write(tmp_path, {"train.py": "x = 1\n"})
    path = str(tmp_path / "train.py")
    buffer = "import torch\n\n\ndef make():\n    return torch.zeros(3)\n\n\ny = make().to('cuda')\n"
    summarized = []
    original = project.ProjectModules._summarize
    monkeypatch.setattr(project.ProjectModules, "_summarize",
                        lambda self, *args, **kwargs: summarized.append(args[0]) or original(self, *args, **kwargs))
    found = engine.lint_source(buffer, path, resolve_settings(tmp_path, isolated=True, select=["TL201"]))
    assert [(d.code, d.line) for d in found] == [("TL201", 7)]  # make() returns a factory's CPU tensor
    assert summarized == [path]
    assert project_modules_for(tmp_path).summary(path).function("make") is None  # the disk's text again


def test_an_edited_buffer_that_stops_before_the_walk_is_released_too(tmp_path, monkeypatch):
    """A lint that ends between the prechecks and the walk (a file too deep for LibCST, one LibCST
    cannot parse) still lets go of the buffer's summary: later questions read the disk's text."""
    from torchlint import engine
    from torchlint.config import resolve_settings

    write(tmp_path, {"train.py": "x = 1\n"})
    path = str(tmp_path / "train.py")
    buffer = "import torch\n\n\ndef make():\n    return torch.zeros(3)\n\n\ny = make().to('cuda')\n"
    monkeypatch.setattr(engine, "_too_deep", lambda tree, path: engine.syntax_error(path, "too deep"))
    found = engine.lint_source(buffer, path, resolve_settings(tmp_path, isolated=True, select=["TL201"]))
    assert [d.code for d in found] == ["TL000"]
    assert project_modules_for(tmp_path).summary(path).function("make") is None  # the disk's text


def project_modules_for(root: Path):
    from torchlint.config import resolve_settings
    from torchlint.context import project_modules

    return project_modules(resolve_settings(root, isolated=True))


def test_disk_cache_is_used_and_keyed_by_content(tmp_path, monkeypatch):
    project, cache = tmp_path / "project", tmp_path / "cache"
    write(project, PROJECT)
    train = str(project / "train.py")
    expected = facts(ProjectModules(project, cache_dir=cache).summaries.function(train, "fit"), project)
    assert len(list(cache.rglob("*.json"))) == 4  # train.py, utils.py, pkg/__init__.py, pkg/meters.py

    import torchlint.analysis.project as project_module

    def no_parse(*args, **kwargs):
        raise AssertionError("parsed a file the cache holds")
    monkeypatch.setattr(project_module.ast, "parse", no_parse)
    assert facts(ProjectModules(project, cache_dir=cache).summaries.function(train, "fit"), project) == expected
    monkeypatch.undo()

    (project / "utils.py").write_text("def log_step(loss):\n    pass\n\ndef free_memory():\n    pass\n",
                                      encoding="utf-8")
    changed = facts(ProjectModules(project, cache_dir=cache).summaries.function(train, "fit"), project)
    assert changed == [line for line in expected if "utils.py" not in line]
    assert len(list(cache.rglob("*.json"))) == 5


def test_bad_cache_entries_are_misses(tmp_path):
    project, cache = tmp_path / "project", tmp_path / "cache"
    write(project, {"utils.py": "def log(x):\n    x.item()\n"})
    path = str(project / "utils.py")
    ProjectModules(project, cache_dir=cache).summary(path)
    [entry] = cache.rglob("*.json")
    good = json.loads(entry.read_text(encoding="utf-8"))
    for bad in ("{not json", json.dumps({**good, "version": -1}), json.dumps({**good, "path": "/elsewhere.py"}),
                json.dumps({**good, "summary": {**good["summary"], "functions": {"log": {"path": 3}}}}), "[]"):
        entry.write_text(bad, encoding="utf-8")
        summary = ProjectModules(project, cache_dir=cache).summary(path)
        assert len(summary.function("log").host_syncs) == 1
        assert json.loads(entry.read_text(encoding="utf-8")) == good  # rewritten


def test_summaries_survive_json(tmp_path):
    source = textwrap.dedent(GRAD) + textwrap.dedent(LAYERS) + textwrap.dedent(METERS)
    module = summarize_module(ast.parse(source), source, str(tmp_path / "m.py"))
    data = json.loads(json.dumps(module.to_json()))
    back = ModuleSummary.from_json(data)
    assert back.functions == module.functions and back.classes == module.classes and back.scope == module.scope
    assert back.to_json() == data


def test_summaries_pickle_complete(tmp_path):
    source = textwrap.dedent(GRAD)
    module = summarize_module(ast.parse(source), source, "m.py")
    module.function("run")
    back = pickle.loads(pickle.dumps(module))
    assert sorted(back.functions) == ["attack", "evaluate", "predict", "predict_block", "run", "sample"]
    assert back.functions == module.functions


# --- positions, laziness ---

def test_columns_count_code_points(tmp_path):
    source = 'def f(loss):\n    s = "größe 😀"; v = loss.item()\n'
    summary = summarize_module(ast.parse(source), source, "m.py").function("f")
    assert summary.host_syncs[0].effect == Effect("m.py", 2, 23, 2, 34, "loss.item()")


def test_a_function_nested_too_deep_is_unknown(tmp_path):
    write(tmp_path, {"deep.py": "def f(x):\n    return (" + " + ".join(["x"] * 900) + ").item()\n",
                     "train.py": "from deep import f\n\ndef g(x):\n    return f(x)\n"})
    summaries = ProjectModules(tmp_path).summaries
    assert summaries.resolve_call(str(tmp_path / "train.py"), "f", "g") is None
    assert summaries.function(str(tmp_path / "train.py"), "g").host_syncs == ()


def test_functions_are_summarized_when_asked(tmp_path):
    write(tmp_path, PROJECT)
    module = summarize_module(ast.parse((tmp_path / "utils.py").read_text()), "", str(tmp_path / "utils.py"))
    assert module.functions == {}
    module.function("free_memory")
    assert list(module.functions) == ["free_memory"]

    modules = ProjectModules(tmp_path)
    modules.summaries.resolve_call(str(tmp_path / "train.py"), "log_step", "fit")
    consulted = modules.summaries.consulted(tmp_path / "train.py")
    assert consulted == {str(tmp_path / name) for name in ("train.py", "utils.py")}


def test_trees_let_go_come_back_with_the_same_summaries(tmp_path):
    nested = "def outer(loss):\n    def inner(t):\n        def deepest(u):\n            return u.item()\n" \
             "        return deepest(t)\n    return inner(loss)\n"
    source = textwrap.dedent(GRAD) + textwrap.dedent(METERS) + nested
    whole = summarize_module(ast.parse(source), source, "m.py")
    whole.summarize_all()

    module = summarize_module(ast.parse(source), source, "m.py")
    module.function("outer")  # registers outer.inner: let go before it is summarized
    reloads = []
    module.release_trees(lambda: reloads.append(1) or summarize_module(ast.parse(source), source, "m.py"))
    assert not module.holds_trees() and reloads == []
    assert module.function("outer.inner.deepest") == whole.functions["outer.inner.deepest"] and reloads == [1]
    assert module.function("outer.inner") == whole.functions["outer.inner"]
    module.summarize_all()
    assert module.functions == whole.functions and reloads == [1]


def test_a_function_let_go_comes_back_parsed_alone_with_the_same_summary():
    from torchlint.analysis.function_facts import definition_summarizer
    from torchlint.analysis.module_index import SourceLines

    odd = ("class Tabbed:\n\t@staticmethod\n\t@property\n\tdef f(x):  # é\n\t\treturn x.item()\n"
           "async def stream(loss):\n    return f'{loss.item()}'\n")
    nested = "def outer(loss):\n    def inner(t):\n        def deepest(u):\n            return u.item()\n" \
             "        return deepest(t)\n    return inner(loss)\n"
    for source in (textwrap.dedent(GRAD) + textwrap.dedent(METERS) + nested + odd,
                   (nested + "ĉ = 'ŝ'\n" + odd).replace("\n", "\r\n")):
        whole = summarize_module(ast.parse(source), source, "m.py")
        whole.summarize_all()
        module = summarize_module(ast.parse(source), source, "m.py")
        module.function("outer")  # registers outer.inner: let go before it is summarized
        reloads, restored = [], []
        module.release_trees(lambda: reloads.append(1) or summarize_module(ast.parse(source), source, "m.py"),
                             lambda first, last: restored.append((first, last))
                             or definition_summarizer(SourceLines(source), first, last))
        assert module.function("outer.inner.deepest") == whole.functions["outer.inner.deepest"]
        module.summarize_all()
        for name in (*whole.functions, "Tabbed.f", "stream"):
            assert module.function(name) == whole.functions[name], name
        assert reloads == [] and len(restored) >= 3  # each parsed alone, never the whole file again


def test_a_function_that_cannot_be_parsed_alone_comes_back_from_the_whole_file():
    source = "def outer(loss):\n    def inner(t):\n        return t.item()\n    return inner(loss)\n"
    whole = summarize_module(ast.parse(source), source, "m.py")
    whole.summarize_all()
    module = summarize_module(ast.parse(source), source, "m.py")
    module.function("outer")
    reloads = []
    module.release_trees(lambda: reloads.append(1) or summarize_module(ast.parse(source), source, "m.py"),
                         lambda first, last: None)
    assert module.function("outer.inner") == whole.functions["outer.inner"] and reloads == [1]


def test_a_long_run_keeps_the_trees_of_recent_modules_only(tmp_path, monkeypatch):
    import torchlint.analysis.project as project

    monkeypatch.setattr(project, "RETAINED_SOURCE", 1)  # one module's trees at a time
    files = {f"m{i}.py": f"def f{i}(loss):\n    return loss.item()\n" for i in range(3)}
    write(tmp_path, files)
    modules = ProjectModules(tmp_path)
    loaded = [modules.summary(str(tmp_path / name)) for name in files]
    assert [summary.holds_trees() for summary in loaded] == [False, False, True]
    assert [modules.summary(str(tmp_path / name)) for name in files] == loaded  # the index stays
    assert loaded[0].function("f0").host_syncs[0].effect.what == "loss.item()"  # parsed again
    (tmp_path / "m1.py").write_text("x = 1\n")
    assert loaded[1].function("f1") is None  # the file changed: what it held is not guessed


def test_an_instance_a_factory_function_returns(tmp_path):
    """``logger = make_logger(...)`` where every return of make_logger is ``C(...)`` or None: the
    logger's methods are C's; a factory that may return either of two classes, or a value it was
    given, resolves to nothing."""
    write(tmp_path, {
        "log.py": ("class Logger:\n    def log(self, t):\n        print(t.item())\n\n"
                   "class Other:\n    def log(self, t):\n        pass\n"),
        "train.py": ("from log import Logger, Other\n\n"
                     "def make(rank):\n    if rank == 0:\n        logger = Logger()\n    else:\n"
                     "        logger = None\n    return logger\n\n"
                     "def either(rank):\n    if rank:\n        return Logger()\n    return Other()\n\n"
                     "def given(logger):\n    return logger\n\n"
                     "def train(rank):\n    a = make(rank)\n    b = either(rank)\n    c = given(Logger())\n"
                     "    a.log(1)\n    b.log(1)\n    c.log(1)\n"),
    })
    summaries = ProjectModules(tmp_path).summaries
    train = str(tmp_path / "train.py")
    found = summaries.resolve_call(train, "a.log", "train")
    assert found is not None and found.qualname == "Logger.log" and found.host_syncs
    assert summaries.resolve_call(train, "b.log", "train") is None
    assert summaries.resolve_call(train, "c.log", "train") is None


def test_a_tensor_given_to_add_scalar_is_a_sync_of_its_value(tmp_path):
    write(tmp_path, {"log.py": ("def log(writer, loss, step):\n    writer.add_scalar('loss', loss, step)\n"
                                "    writer.add_scalar('step', step, global_step=step)\n")})
    summary = ProjectModules(tmp_path).summaries.function(str(tmp_path / "log.py"), "log")
    assert [(sync.how, [(op.kind, op.name) for op in sync.reads]) for sync in summary.host_syncs] == [
        ("log", [("parameter", "loss")]), ("log", [("parameter", "step")])]


def test_a_read_under_a_test_for_a_tensor_is_a_guarded_sync(tmp_path):
    """``if isinstance(v, torch.Tensor): v = v.item()`` reads v where it is a tensor ("guarded");
    a remainder test inside such a test still leaves its reads out."""
    write(tmp_path, {"meter.py": ("import torch\n\n"
                                  "def update(v, step):\n    if isinstance(v, torch.Tensor):\n        v = v.item()\n"
                                  "        if step % 10 == 0:\n            print(v.tolist())\n    return v\n")})
    summary = ProjectModules(tmp_path).summaries.function(str(tmp_path / "meter.py"), "update")
    assert [(sync.how, sync.effect.what) for sync in summary.host_syncs] == [("guarded", "v.item()")]


def synced_reads(summary) -> list[tuple[str, list[tuple[str, str]]]]:
    """Each host sync of a summary with what it reads: (its code, sorted (operand kind, device))."""
    return [(sync.effect.what, sorted((op.kind, op.device) for op in sync.reads)) for sync in summary.host_syncs]


def test_a_returned_tuple_is_read_element_by_element_where_the_caller_unpacks_it(tmp_path):
    """``return img, pad`` with ``out, pad = f(img)``: the pad is what the callee put there only."""
    write(tmp_path, {"pad.py": ("import torch\n\n"
                                "def pads(img):\n    return img * 2, torch.zeros(2)\n\n"
                                "def use(img):\n    out, pad = pads(img)\n    whole = pads(img)\n"
                                "    return pad.item(), whole[0].item()\n")})
    summary = ProjectModules(tmp_path).summaries.function(str(tmp_path / "pad.py"), "use")
    assert synced_reads(summary) == [
        ("pad.item()", [("tensor", "cpu")]),
        ("whole[0].item()", [("parameter", ""), ("tensor", "cpu")])]


def test_where_a_factory_makes_its_tensor(tmp_path):
    """No ``device=`` or "cpu": the CPU; a device parameter: what the call passes, or its default;
    ``x.device``: where x lives; ``.cuda()`` or a call nothing resolves: anywhere."""
    write(tmp_path, {"make.py": (
        "import torch\nfrom elsewhere import move\n\n"
        "def make(size, device='cpu'):\n    return torch.ones(size, device=device).bernoulli_(0.5)\n\n"
        "def like(x):\n    d = x.device\n    return torch.zeros(3, device=d)\n\n"
        "def use(img):\n"
        "    a = make(3).item()\n    b = make(3, 'cuda').item()\n    c = like(make(3)).item()\n"
        "    d = like(img).item()\n    e = make(3).cuda().item()\n    f = move(make(3)).item()\n"
        "    g = make(3).to(torch.int32).item()\n    h = torch.tensor(img).item()\n")})
    summary = ProjectModules(tmp_path).summaries.function(str(tmp_path / "make.py"), "use")
    assert synced_reads(summary) == [
        ("make(3).item()", [("tensor", "cpu")]),
        ("make(3, 'cuda').item()", [("tensor", "")]),
        ("like(make(3)).item()", [("tensor", "cpu")]),
        ("like(img).item()", [("tensor", "of:0")]),
        ("make(3).cuda().item()", [("tensor", "")]),
        ("move(make(3)).item()", [("tensor", "")]),
        ("make(3).to(torch.int32).item()", [("tensor", "cpu")]),
        ("torch.tensor(img).item()", [("tensor", "")])]


def test_a_cpu_tensor_made_under_a_condition_keeps_what_was_there(tmp_path):
    write(tmp_path, {"cond.py": ("import torch\n\n"
                                 "def pick(x, flag):\n    y = x\n    if flag:\n        y = torch.zeros(1)\n"
                                 "    return y.item()\n")})
    summary = ProjectModules(tmp_path).summaries.function(str(tmp_path / "cond.py"), "pick")
    assert sorted((op.kind, op.device) for op in summary.host_syncs[0].reads) == [("parameter", ""), ("tensor", "cpu")]


def test_a_fixed_text_linted_after_the_saved_one_leaves_no_stale_entry(tmp_path, monkeypatch):
    """`--fix` lints the saved file, then its fixed text before writing it: the saved text's entry
    must not outlive its replacement (a later eviction read it and failed with a KeyError)."""
    import torchlint.analysis.project as project

    monkeypatch.setattr(project, "RETAINED_SOURCE", 1)
    files = {f"m{i}.py": f"def f{i}(loss):\n    return loss.item()\n" for i in range(3)}
    write(tmp_path, files)
    modules = ProjectModules(tmp_path)
    first = str(tmp_path / "m0.py")
    saved = files["m0.py"]
    assert modules.use_source(first, saved, ast.parse(saved)).function("f0") is not None  # kept as if read
    fixed = saved.replace("loss.item()", "loss")
    assert modules.use_source(first, fixed, ast.parse(fixed)) is not None
    modules.release(first)
    for name in ("m1.py", "m2.py"):  # each load evicts the least recently used trees
        assert modules.summary(str(tmp_path / name)).function(name[:2].replace("m", "f")) is not None
    assert modules.summary(first).function("f0").host_syncs  # read from disk again: the saved text


BINDINGS = '''
import torch
from torch import nn

class Trainer(nn.Module):
    def fit(self, loader, logger: Logger):
        self.meter = Meter()
        self.model = build()
        if (n := len(loader)) > 0:
            step = self.train_step
        else:
            step = self.other
        net = Net(3)
        keep = lambda: (hidden := 1)
        for i, batch in enumerate(loader):
            out = net(batch)
        with open("f") as handle:
            from utils import helper
        def inner():
            class Local:
                def run(self):
                    self.x = Thing()
            return Local
        return out
        after = 1
'''


def test_bindings_alone_are_those_of_the_summary():
    """``ModuleSummary.bindings`` (what resolution reads) walks no facts but binds as the summary does."""
    whole = summarize_module(ast.parse(BINDINGS), BINDINGS, "m.py")
    whole.summarize_all()
    assert set(whole.functions) == {"Trainer.fit", "Trainer.fit.inner", "Trainer.fit.inner.Local.run"}
    alone = summarize_module(ast.parse(BINDINGS), BINDINGS, "m.py")
    # outer first: walking a function registers what it defines inside
    for qualname in ("Trainer.fit", "Trainer.fit.inner", "Trainer.fit.inner.Local.run"):
        bindings, summary = alone.bindings(qualname), whole.functions[qualname]
        assert (bindings.kind, bindings.class_name, bindings.self_name, bindings.scope, bindings.self_attributes) == \
            (summary.kind, summary.class_name, summary.self_name, summary.scope, summary.self_attributes)
    assert alone.functions == {}
    assert {"n", "step", "net", "i", "batch", "handle", "helper", "inner"} <= alone.bindings("Trainer.fit").scope.locals
    assert "hidden" not in alone.bindings("Trainer.fit").scope.locals and alone.classes == whole.classes
