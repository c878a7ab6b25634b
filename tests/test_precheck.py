"""The cheap first pass (torchlint/analysis/index.py) must never hide a finding: linting with the
prechecks gives exactly what linting without them gives, on every fixture and realistic script."""

from __future__ import annotations

import ast
import re
from dataclasses import replace
from pathlib import Path

import pytest

from torchlint import engine
from torchlint.config import resolve_settings
from torchlint.analysis.index import SyntaxIndex
from torchlint.rule import Rule, all_rules

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted(p for folder in ("fixtures", "bench/realistic") for p in (ROOT / folder).rglob("*.py"))
SETTINGS = resolve_settings(ROOT, isolated=True, select=["ALL"])


def lint(path: Path, prechecks: bool, monkeypatch) -> list:
    with monkeypatch.context() as patch:
        if not prechecks:
            patch.setattr(engine, "_prechecked", lambda rules, *args, **kwargs: rules)
        return engine.lint_source(path.read_text(encoding="utf-8"), str(path), SETTINGS)


def test_there_are_sources_and_prechecks():
    assert len(SOURCES) > 150
    assert sum(rule.precheck.__func__ is not Rule.precheck.__func__ for rule in all_rules()) >= 10


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_prechecks_hide_nothing(path, monkeypatch):
    assert lint(path, True, monkeypatch) == lint(path, False, monkeypatch)


def prechecked(source: str) -> set[str]:
    index = SyntaxIndex(ast.parse(source), source)
    return {rule.code for rule in all_rules() if rule.precheck(index)}


@pytest.mark.parametrize("source, code", [
    # a name imported under an alias is still the name
    ("import numpy as np\nfrom torch import tensor as T\nx = T(np.ones(3))\n", "TL204"),
    ("from torch.nn import Parameter as P\nw = P(torch.randn(3)).cuda()\n", "TL102"),
    ("from torch.nn import Conv2d as C, BatchNorm2d as B\nm = nn.Sequential(C(1, 2, 3), B(2))\n", "TL401"),
    # a class derived from a LightningModule through another class of the file
    ("class Base(L.LightningModule): pass\nclass M(Base):\n    def f(self):\n        self.log('a', x.item())\n",
     "TL903"),
    # `backward` through Accelerate and Lightning's manual optimization
    ("for b in d:\n    losses.append(loss)\n    self.manual_backward(loss)\n", "TL101"),
    ("while True:\n    total += loss\n    accelerator.backward(loss)\n", "TL101"),
    # a decorated method: its decorators count as inside it
    ("import torch\nclass M(torch.nn.Module):\n    @dec\n    def __init__(self):\n        self.a = torch.zeros(3, device='cuda')\n",
     "TL205"),
    # device moves as RuleContext.device_move reads them
    ("x = torch.zeros(3).to(device=dev, dtype=torch.float16)\n", "TL201"),
    ("from torch import float16 as half\nx = torch.zeros(3).to(d, half)\n", "TL201"),
    ("x = x.cpu()\nx = x.cuda()\n", "TL202"),
    ("y = x.to('cpu').float().to(device)\n", "TL202"),
    ("import numpy as np\na = np.zeros(3)\nt = torch.tensor(a)\n", "TL204"),
    ("from numpy import zeros as z\nt = torch.tensor(z(3))\n", "TL204"),
    # compiled code: a function of the file compiled, a module class compiled, a compiled callable in a loop
    ("import torch\ndef step(x):\n    print(x)\nfast = torch.compile(step)\n", "TLC001"),
    ("import torch.nn as nn\nclass Net(nn.Module):\n    def forward(self, x):\n        return x.item()\n"
     "net = Net().cuda()\nnet.compile()\n", "TLC001"),
    ("import torch\n@torch.compile\ndef f(x, n):\n    return x * n\nfor step in range(9):\n    f(x, step)\n", "TLC003"),
    ("import torch\n@torch.compile\ndef step(x, n):\n    return x[:, :n]\nfor i in range(9):\n    step(x, i)\n",
     "TLC004"),
    ("from torch.utils.data import DataLoader\nloader = DataLoader(ds, prefetch_factor=4)\n", "TL604"),
    ("import numpy as np\nimport torch\ndef f(path):\n    a = np.load(path)\n    return torch.tensor(a)\n", "TL204"),
    ("from torch.utils.data import DataLoader\nloader = DataLoader(ds, num_workers=4)\nfor epoch in range(9):\n"
     "    for batch in loader:\n        step(batch)\n", "TL603"),
    ("from torch.utils.data import DataLoader\ndef train_dataloader(self):\n    return DataLoader(ds, num_workers=n)\n",
     "TL603"),
    ("from torch.nn.parallel import DistributedDataParallel as D\nm = D(net, find_unused_parameters=True)\n", "TL503"),
    ("import torch\ndef run(model, xs):\n    model.eval()\n    with torch.no_grad():\n        for x in xs:\n"
     "            out = model(x)\n", "TL106"),
    ("from apex import amp\nmodel, opt = amp.initialize(model, opt)\n", "TL702"),
    ("import torch\nclass Net(torch.nn.Module):\n    pass\nmodel = Net()\nmodel.forward(x)\n", "TL506"),
    ("import torch\nif __name__ == '__main__':\n    torch.autograd.set_detect_anomaly(True)\n", "TL803"),
    ("import torch\ngpu = torch.device('cuda')\nx = torch.zeros(3).to(gpu)\n", "TL201"),
    # attention through names with one reaching assignment each, a dropout layer and a softmax layer
    ("import torch\nfrom torch import nn\nclass A(nn.Module):\n    def __init__(self):\n"
     "        self.drop = nn.Dropout(0.1)\n        self.sm = nn.Softmax(dim=-1)\n    def forward(self, q, k, v):\n"
     "        kt = k.permute(0, 1, 3, 2)\n        a = (q @ kt) * 0.125\n        if c:\n            b = 1\n"
     "        a = a.masked_fill(m, 0)\n        a = self.sm(a.float()).type_as(q)\n        a = self.drop(a)\n"
     "        return torch.matmul(a, v)\n", "TL406"),
    # a loss given a softmax through a name, a criterion the class builds, a model's last layer
    ("import torch\nfrom torch import nn\nclass T:\n    def __init__(self):\n"
     "        self.crit = nn.CrossEntropyLoss()\n"
     "    def step(self, z, y):\n        p = z.softmax(1)\n        return self.crit(p.view(-1), y)\n", "TL407"),
    ("import torch.nn.functional as F\nfrom torch import nn\nnet = nn.Sequential(nn.Linear(2, 2), nn.Sigmoid())\n"
     "loss = F.binary_cross_entropy_with_logits(net(x), y)\n",
     "TL408"),
    # an old AMP spelling where the walk reports it: called, a bare decorator, a reference passed,
    # assigned, returned, a class's base, a branch of a conditional expression
    ("import torch\nf = partial(torch.cuda.amp.autocast, dtype=d)\n", "TL701"),
    ("from torch.cuda.amp import custom_fwd\n@custom_fwd\ndef f(): pass\n", "TL701"),
    ("import torch\nctx = torch.cuda.amp.autocast if amp else nullcontext\n", "TL701"),
    ("import torch\nclass S(torch.cuda.amp.GradScaler): pass\n", "TL701"),
    ("import torch\ntry:\n    pass\nexcept* ImportError:\n    s = torch.cuda.amp.GradScaler()\n", "TL701"),
    # a graph kept in a training loop, of a name that a backward backpropagates
    ("for b in d:\n    total = total + loss * 2\n    scaler.scale(loss).backward()\n", "TL101"),
    # a step before the backward; no zero_grad; a step under a remainder test, a backward outside it
    ("for b in d:\n    optimizer.step()\n    loss.backward()\n", "TL807"),
    ("for b in d:\n    loss.backward()\n    optimizer.step()\n", "TL804"),
    ("for i, b in enumerate(d):\n    loss.backward()\n    if (i + 1) % k == 0:\n        opt.step()\n"
     "        opt.zero_grad()\n", "TL805"),
    ("for b in d:\n    for c in b.chunk(4):\n        loss.backward()\n    opt.step()\n    opt.zero_grad()\n",
     "TL805"),
    # a layer and its norm chained in one class, by a keyword argument
    ("import torch.nn as nn\nclass A(nn.Module):\n    def __init__(self):\n        self.conv = nn.Conv2d(1, 2, 3)\n"
     "        self.bn = nn.BatchNorm2d(2)\n    def forward(self, x):\n        x = self.conv(x)\n"
     "        return self.bn(input=x)\n", "TL401"),
    ("import torch.nn as nn\nclass A(nn.Module):\n    def __init__(self):\n        self.conv = nn.Conv2d(1, 2, 3)\n"
     "        self.bn = nn.BatchNorm2d(2)\n    def forward(self, x):\n        x = self.conv(x)\n"
     "        y = 1; x = self.bn(x)\n        return y\n", "TL401"),  # the line before, `;` on the norm's line
    # a model in an evaluation loop; torch.no_grad imported in a function only (Imports may not see it)
    ("def validate(model, loader):\n    for b in loader:\n        model(b)\n", "TL103"),
    ("def validate(model, loader):\n    import torch\n    for b in loader:\n        with torch.no_grad():\n"
     "            model(b)\n", "TL103"),
    # a method of a derived class: its eval() set before the loop; a class of its own, nearer
    ("class E(Base):\n    def validate(self, loader):\n        self.model.eval()\n        for b in loader:\n"
     "            self.model(b)\n", "TL103"),
    ("class E(object):\n    def validate(self, loader):\n        for b in loader:\n            self.model(b)\n", "TL103"),
    ("class E(Base):\n    def validate(self, loader):\n        class Local:\n            for b in loader:\n"
     "                model(b)\n", "TL103"),
    # a Lightning training_step with an explicit read; a loop in a script that names CUDA
    ("class M(L.LightningModule):\n    def training_step(self, batch, i):\n        print(batch.mean().item())\n",
     "TL802"),
    ("for b in d:\n    loss.backward()\n    total += loss.item()\nx = x.cuda()\n", "TL802"),
    ("for b in d:\n    loss = f(b.cuda())\n    loss.backward()\n    print(f'{loss:.3f}')\n", "TL802"),
    # an eval() after the backward of an iteration, through a helper of the file
    ("def val(m):\n    m.eval()\nfor e in range(3):\n    loss.backward()\n    val(model)\n", "TL806"),
])
def test_precheck_passes_the_shape(source, code):
    assert code in prechecked(source)


@pytest.mark.parametrize("source, code", [
    ("x = torch.tensor([1, 2], dtype=torch.float32)\n", "TL204"),  # keywords: not the pattern
    ("import torch\na = torch.arange(3)\nt = torch.tensor(a)\n", "TL204"),  # torch's arange, not NumPy's
    ("m = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU())\n", "TL401"),  # no norm at all
    ("for b in d:\n    losses.append(loss)\n", "TL101"),  # no backward in the loop
    ("for b in d:\n    n += y.size(0)\n    t += loss.item()\n    loss.backward()\n", "TL101"),  # no graph kept
    ("for b in d:\n    envs.step(a)\n    loss.backward()\n", "TL807"),  # an environment, not an optimizer
    ("for b in d:\n    loss.backward()\n    total += loss.item()\n", "TL802"),  # a script that never names CUDA
    ("for i, b in enumerate(d):\n    loss.backward()\n    if i % 100 == 0:\n        print(loss.item())\n"
     "x = x.cuda()\n", "TL802"),  # every 100 steps
    ("for b in d:\n    actions = q(b.cuda()).argmax(1).cpu().numpy()\n    envs.step(actions)\n    loss.backward()\n",
     "TL802"),  # an environment needs the actions on the host
    ("class M(L.LightningModule):\n    def training_step(self, batch, i):\n        return self.loss(batch)\n",
     "TL802"),  # no read, no helper of the project known to sync
    ("def val(m):\n    m.eval()\nfor e in range(3):\n    val(model)\n    loss.backward()\n", "TL806"),  # eval first
    ("def sample(m):\n    m.eval()\n    z = m(x)\n    m.train()\n    return z\nfor e in range(3):\n"
     "    loss.backward()\n    sample(model)\n", "TL806"),  # put back in training mode
    ("for b in d:\n    loss_d.backward()\n    opt_d.step()\n    loss_g.backward()\n    opt_g.step()\n",
     "TL807"),  # each step after a backward of the loop
    ("for b in d:\n    loss.backward()\n    optimizer.step()\n    optimizer.zero_grad()\n", "TL804"),  # cleared
    ("for i, b in enumerate(d):\n    if i % k == 0:\n        loss.backward()\n        opt.step()\n", "TL805"),
    ("import torch.nn as nn\nclass A(nn.Module):\n    def __init__(self):\n        self.conv = nn.Conv2d(1, 2, 3)\n"
     "    def forward(self, x):\n        return self.bn(self.conv(x))\nclass B(nn.Module):\n"
     "    def __init__(self):\n        self.bn = nn.BatchNorm2d(2)\n", "TL401"),  # the norm is another class's
    ("import torch.nn as nn\nclass A(nn.Module):\n    def __init__(self):\n        self.conv = nn.Conv2d(1, 2, 3)\n"
     "        self.bn = nn.BatchNorm2d(2)\n    def forward(self, x):\n        x = self.conv(x)\n"
     "        x = self.act(x)\n        return self.bn(x)\n", "TL401"),  # not the statement just before
    ("from x import writer\ndef validate(loader):\n    for b in loader:\n        writer.generator(b)\n", "TL103"),
    ("import torch\ndef validate(model, loader):\n    for b in loader:\n        with torch.no_grad():\n"
     "            model(b)\n", "TL103"),  # grad is off
    ("def train(model, loader):\n    ema.eval()\n    for b in loader:\n        model(b).backward()\n",
     "TL103"),  # the loop trains
    # a method known by its name only, of a derived class (its callers set the grad mode); a Lightning hook
    ("class E(Base):\n    def validate(self, loader):\n        for b in loader:\n            self.model(b)\n", "TL103"),
    ("class E(Base):\n    if True:\n        pass\n    def generate(self, xs):\n        while xs:\n"
     "            self.generator(xs.pop())\n", "TL103"),
    ("def validation_step(model, loader):\n    model.eval()\n    for b in loader:\n        model(b)\n", "TL103"),
    ("class M(nn.Module):\n    def f(self):\n        self.log('a', x.item())\n", "TL903"),  # not Lightning
    ("x = torch.zeros(3).to(torch.float16)\n", "TL201"),  # a dtype, not a device
    ("import torch\nKNOWN = [torch.cuda.amp.autocast]\n", "TL701"),  # in a list: compared, not called
    ("import torch\nok = isinstance(s, torch.cuda.amp.GradScaler)\n", "TL701"),  # a type check
    ("import torch\ns = torch.amp.GradScaler('cuda') if _TORCH_GREATER_EQUAL_2_4 else torch.cuda.amp.GradScaler()\n",
     "TL701"),  # the fallback for older torch
    ("x = torch.zeros(3).to(device=device, dtype=dtype)\n", "TL201"),  # `dtype` is not known to be one
    ("w = weight.to('cpu')\nw = w.float()\n", "TL202"),  # never moved back
    ("t = torch.tensor([1, 2])\n", "TL204"),  # a list, not an array
    ("for x, y in loader:\n    x = x.cuda()\n", "TL203"),  # no loader pins memory
    # not a torch module class (a base from a relative import, or none): Modules.classes says no
    ("from .module import Module\nclass M(Module):\n    def __init__(self):\n        self.layers = [Linear(2, 2)]\n",
     "TL405"),
    ("import torch\nclass M:\n    def __init__(self):\n        self.a = torch.zeros(3, device='cuda')\n", "TL205"),
    ("import torch\nclass Plan:\n    def run(self, x):\n        return self.step.forward(x)\n", "TL506"),
    ("import torch_tensorrt\nm = torch_tensorrt.compile(model)\n", "TLC001"),  # not torch.compile
    ("import torch\ndef build(gm):\n    return torch.compile(gm)\n", "TLC001"),  # nothing of the file compiled
    ("import torch\nclass Cache:\n    def load(self):\n        return self.kernel.compile(self.src)\n", "TLC001"),
    ("import torch\nfast = torch.compile(step)\nfor i in range(9):\n    other(x, i)\n", "TLC003"),  # not called
    ("import torch\nfast = torch.compile(step)\ntorch._dynamo.mark_dynamic(x, 0)\nfor i in range(9):\n"
     "    fast(x[:i])\n", "TLC004"),  # a shape marked dynamic
    ("from torch.utils.data import DataLoader\nl = DataLoader(ds, num_workers=n, persistent_workers=keep and n > 0)\n",
     "TL604"),  # not a value known to need workers
    ("import numpy as np\ndef f(batch):\n    lam, mix = params(batch)\n    lam = np.concatenate((lam, lam))\n"
     "    return torch.tensor(lam)\n", "TL204"),  # also bound by unpacking: not known to be an array
    ("from torch.utils.data import DataLoader\ndef make(ds):\n    return DataLoader(ds, num_workers=4)\n",
     "TL603"),  # returned by a function that is no epoch hook
    ("registry.register('ddp', find_unused_parameters=True)\n", "TL503"),  # not DDP
    ("import torch\ndef init(self, x):\n    with torch.no_grad():\n        for m in self.backbone.modules():\n"
     "            pass\n        o = self.backbone(x)\n    self.backbone.eval()\n", "TL106"),  # no eval() before
    ("try:\n    from apex.normalization import fused_layer_norm\nexcept ImportError:\n    pass\n", "TL702"),
    ("import torch\nmodel = Net()\ndef run(model, x):\n    return model.forward(x)\n", "TL506"),  # a parameter
    ("import torch\nif debug:\n    torch.autograd.set_detect_anomaly(True)\n", "TL803"),  # behind a flag
    ("x = x.cpu()\ny = 1\nx = x.cuda()\n", "TL202"),  # not the next statement
    ("from torch.utils.data import Dataset\nclass D(Dataset):\n    def __init__(self):\n"
     "        self.layers = [Linear(2, 2), Linear(2, 2)]\n", "TL405"),  # a dataset, not a module
    ("with profiler.profile('save'):\n    save()\n", "TL803"),  # a profiler no import names
    ("import torch\nwith torch.profiler.profile(enabled=False):\n    loss.backward()\n", "TL803"),  # switched off
    ("import torch\nwith torch.no_grad():\n    for p in params:\n        p.mul_(2)\n", "TL106"),  # runs no model
    # a softmax over dim 1 (a classifier's), and a product of untransposed keys
    ("import torch\ndef f(q, k, v):\n    a = torch.softmax(q @ k, dim=1)\n    return a @ v\n", "TL406"),
    # the dropout's input comes from two branches (the finder follows one reaching assignment)
    ("import torch\ndef f(q, k, v):\n    a = q @ k.transpose(-2, -1)\n    if c:\n        a = a.softmax(dim=-1)\n"
     "    else:\n        a = torch.softmax(a, -1)\n    a = F.dropout(a, 0.1)\n    return a @ v\n", "TL406"),
    # the scores reassigned in a branch; keys permuted but not transposed; a view, not a cast, in the softmax
    ("import torch\ndef f(q, k, v):\n    a = q @ k.mT\n    if c:\n        a = g(a)\n    return a.softmax(dim=-1) @ v\n",
     "TL406"),
    ("import torch\ndef f(q, k, v):\n    k = k.permute(0, 1, 2, 3)\n    return (q @ k).softmax(dim=-1) @ v\n", "TL406"),
    ("import torch\ndef f(q, k, v):\n    a = q @ k.mT\n    return a.view(2, 3).softmax(dim=-1) @ v\n", "TL406"),
    # the loss's input is a parameter, or a linear layer's output (logits, not a softmax)
    ("import torch\ndef f(logits, y):\n    p = F.softmax(logits, 1)\n    return F.cross_entropy(logits, y)\n", "TL407"),
    ("import torch\nclass M(nn.Module):\n    def __init__(self):\n        self.head = nn.Linear(2, 2)\n"
     "    def forward(self, x, y):\n        logits = self.head(x)\n        p = logits.softmax(-1)\n"
     "        return F.cross_entropy(logits.view(-1), y)\n", "TL407"),
    ("import torch\ncrit = nn.BCEWithLogitsLoss()\ndef f(x, y):\n    s = torch.sigmoid(x)\n    return crit(x, y)\n",
     "TL408"),
])
def test_precheck_rejects_what_cannot_match(source, code):
    assert code not in prechecked(source)


def test_a_precheck_reads_the_options_its_rule_reads():
    # TL201's `device-names` makes `gpu` a device: the precheck sees the run's settings
    source = "import torch\nx = torch.zeros(3).to(gpu)\n"
    named = replace(SETTINGS, rule_options={"move-after-create": {"device-names": ["gpu"]}})
    assert [d.code for d in engine.lint_source(source, "train.py", named)] == ["TL201"]
    assert "TL201" not in {d.code for d in engine.lint_source(source, "train.py", SETTINGS)}
    rule = next(rule for rule in all_rules() if rule.code == "TL201")
    assert rule.precheck(SyntaxIndex(ast.parse(source), source, settings=named))
    assert not rule.precheck(SyntaxIndex(ast.parse(source), source, settings=SETTINGS))
    assert rule.precheck(SyntaxIndex(ast.parse(source), source))  # no settings: any name may be a device


# --- text prefilters that check word boundaries in Python ------------------------------------------------

WORD_TEXTS = ["cuda", "x.cuda()", "torch.cuda.amp", "cudart", "_cuda", "cuda_", "use_cuda=1", "# cuda\n", "CUDA",
              "load(f)", "torch.load (f)", "download(url)", "payload(x)", "_load(", "load\n(", "x.load(",
              "xbfloat16", "bfloat16", "float16x", "_fp16", "fp16", "amp.initialize(", "torch.autocast(",
              "autocast_mode", "x.half()", "MyGradScaler", "afloat16", " bf16 ", "bf16_", ""]


@pytest.mark.parametrize("text", WORD_TEXTS)
def test_word_prefilters_answer_as_their_word_boundary_regexes(text):
    from torchlint.analysis.devices import mentions_cuda, uses_reduced_precision
    from torchlint.rules.load_weights_only import LoadWeightsOnly

    reduced = re.compile(r"\bautocast\b|GradScaler|\bfloat16\b|\bbfloat16\b|\.half\(\)|\bbf16\b|\bfp16\b"
                         r"|\bamp\.initialize\b")
    assert mentions_cuda(text) == bool(re.search(r"\bcuda\b", text))
    assert uses_reduced_precision(text) == bool(reduced.search(text))
    assert LoadWeightsOnly.applies(text) == bool(re.search(r"\bload\s*\(", text))


@pytest.mark.parametrize("source, kept, blanked", [
    ('"""Mixed precision is planned."""\nx = 1  # autocast later\n', "x = 1", "autocast"),
    ('p.add_argument("--amp", help="bfloat16 autocast is not supported")\n', '"--amp"', "autocast"),
    ('print("set cudnn.benchmark = True")\nprecision = "bf16-mixed"\n', '"bf16-mixed"', "benchmark"),
    ("NOTE = '''float16\nlater'''\ndtype = 'float16'\n", "'float16'", "later"),
    ('log(f"autocast {x} soon")\n', "log(", "autocast"),
])
def test_code_text_keeps_values_and_blanks_prose(source, kept, blanked):
    from torchlint.analysis.syntax import code_text

    code = code_text(source)
    assert kept in code and blanked not in code
    assert [len(line) for line in code.splitlines()] == [len(line) for line in source.splitlines()]


def test_call_places_match_the_tree():
    import ast

    from torchlint.analysis.index import SyntaxIndex

    source = ("a(); b()\n@d(c())\ndef f(xs):\n    for x in xs:\n        g(lambda: h())\n"
              "    while k():\n        class C:\n            m()\nfor y in z:\n    def inner(): n()\n")
    index = SyntaxIndex(ast.parse(source), source)
    calls = {ast.unparse(call.func): call for call in index.nodes(ast.Call)}
    f = next(node for node in index.nodes(ast.FunctionDef) if node.name == "f")
    inner = next(node for node in index.nodes(ast.FunctionDef) if node.name == "inner")
    lam = index.nodes(ast.Lambda)[0]
    cls = index.nodes(ast.ClassDef)[0]
    loops = {type(node).__name__ + str(node.lineno): node for node in index.nodes(ast.For, ast.While)}
    expected = {  # call -> (scope, innermost loop in it, every loop around, every function around)
        "a": (None, None, (), ()), "b": (None, None, (), ()),
        "c": (None, None, (), (f,)), "d": (None, None, (), (f,)),  # a decorator: outside f's scope, in its lines
        "g": (f, loops["For4"], (loops["For4"],), (f,)),
        "h": (lam, None, (loops["For4"],), (f,)),
        "k": (f, loops["While6"], (loops["While6"],), (f,)),
        "m": (cls, None, (loops["While6"],), (f,)),
        "n": (inner, None, (loops["For9"],), (inner,)),
    }
    for name, (scope, loop, around, functions) in expected.items():
        place = index.place(calls[name])
        assert (place.scope, place.loop, place.loops, place.functions) == (scope, loop, around, functions), name


@pytest.mark.parametrize(("text", "expected"), [
    ("for batch in loader:\n    step(batch)\n", True),
    ("def f():\n\tasync  for x in it:\n\t\tpass\n", True),
    ("x = 1\rwhile x:\r    x -= 1\r", True),  # old Mac line ends
    ("y = [a for a in b]\n", False),  # a comprehension is no loop statement
    ("# wait for the GPU\nx = 'for each'\n", False),
    ("def fork():\n    return format(x)\n", False),
])
def test_a_loop_statement_in_the_text(text, expected):
    from torchlint.analysis.syntax import has_loop_statement

    assert has_loop_statement(text) is expected
    if expected:
        assert any(isinstance(node, (ast.For, ast.AsyncFor, ast.While)) for node in ast.walk(ast.parse(text)))


def test_empty_cache_through_a_helper_needs_a_loop_of_the_file():
    from torchlint.rules.empty_cache_in_loop import EmptyCacheInLoop

    assert not EmptyCacheInLoop.reachable("from utils import free\nfree()\n")
    assert EmptyCacheInLoop.reachable("from utils import free\nfor b in data:\n    free()\n")
    assert not EmptyCacheInLoop.applies("import torch\ntorch.cuda.empty_cache()\n")
