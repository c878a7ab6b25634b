"""A model built in another module of the project (issue 12, shape 4): which convolutions the
project's code builds for a file (``Modules.project_convolutions`` and its precheck twin
``ast_project_convolutions``), and TL402/TL403 reading it as they read the file's own layers.

Each case writes a small project to a temporary folder: ``train.py`` (the script) and the modules
it imports."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import libcst as cst
import pytest

from torchlint import engine
from torchlint.analysis.bindings import Bindings
from torchlint.analysis.calls import Calls
from torchlint.analysis.index import SyntaxIndex
from torchlint.analysis.convolutions import ast_project_convolutions
from torchlint.analysis.modules import Modules
from torchlint.analysis.project import ProjectModules
from torchlint.analysis.summaries import Import
from torchlint.config import resolve_settings


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")


def convolutions(root: Path, script: str = "train.py") -> dict[int, str]:
    """The LibCST answer, as ``{dimension: "name -> file:line what"}``; the precheck twin must give
    the same dimensions."""
    path = root / script
    source = path.read_text(encoding="utf-8")
    module = cst.parse_module(source)
    calls = Calls(str(path), source, ProjectModules(root), [module])
    found = Modules(module, Bindings(module), lambda: calls).project_convolutions
    index = SyntaxIndex(ast.parse(source), source, path=str(path), project=ProjectModules(root))
    assert ast_project_convolutions(index) == frozenset(found)
    return {dimension: f"{c.name} -> {Path(c.effect.path).relative_to(root).as_posix()}:{c.effect.line} "
                       f"{c.effect.what}" for dimension, c in found.items()}


MODELS = """
    import torch.nn as nn


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3)
            self.fc = nn.Linear(8, 10)


    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 10)
    """

CASES = {
    "imported-class": ({"models.py": MODELS, "train.py": """
        from models import Net
        model = Net()
        """}, {2: "Net -> models.py:7 nn.Conv2d(3, 8, 3)"}),
    "imported-but-called-elsewhere": ({"models.py": MODELS, "train.py": """
        from models import Net
        MODELS = {"net": Net}
        """}, {2: "Net -> models.py:7 nn.Conv2d(3, 8, 3)"}),
    "module-attribute": ({"models.py": MODELS, "train.py": """
        import models
        model = models.Net()
        """}, {2: "models.Net -> models.py:7 nn.Conv2d(3, 8, 3)"}),
    "relative-import-in-a-package": ({"pkg/__init__.py": "", "pkg/net.py": MODELS, "pkg/train.py": """
        from .net import Net
        model = Net()
        """}, "pkg/train.py", {2: "Net -> pkg/net.py:7 nn.Conv2d(3, 8, 3)"}),
    "star-import-resolves-what-is-called": ({"models.py": MODELS, "train.py": """
        from models import *

        def main():
            model = Net()
        """}, {2: "Net -> models.py:7 nn.Conv2d(3, 8, 3)"}),
    "star-import-of-a-conv-class-never-called": ({"models.py": MODELS, "train.py": """
        from models import *
        model = MLP()
        """}, {}),
    "helper-function-of-the-module": ({"models.py": """
        import torch.nn as nn

        def make_layers(channels):
            layers = []
            for c in channels:
                layers += [nn.Conv1d(c, c, 3), nn.ReLU()]
            return nn.Sequential(*layers)

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.features = make_layers([4, 8])
        """, "train.py": "from models import Net\nnet = Net()\n"}, {1: "Net -> models.py:6 nn.Conv1d(c, c, 3)"}),
    "base-class-of-another-module": ({"base.py": """
        import torch.nn as nn

        class Backbone(nn.Module):
            def __init__(self):
                super().__init__()
                self.stem = nn.Conv3d(1, 4, 3)
        """, "models.py": """
        import torch.nn as nn
        from base import Backbone

        class Net(Backbone):
            def __init__(self):
                super().__init__()
                self.head = nn.Linear(4, 2)
        """, "train.py": "from models import Net\nnet = Net()\n"}, {3: "Net -> base.py:6 nn.Conv3d(1, 4, 3)"}),
    "class-instantiated-in-another-module": ({"blocks.py": """
        from torch import nn

        class Block(nn.Module):
            def __init__(self, c):
                super().__init__()
                self.conv = nn.ConvTranspose2d(c, c, 4)
        """, "models.py": """
        import torch.nn as nn
        from blocks import Block

        class Generator(nn.Module):
            def __init__(self):
                super().__init__()
                self.blocks = nn.ModuleList([Block(8), Block(8)])
        """, "train.py": "from models import Generator\nG = Generator().cuda()\n"},
        {2: "Generator -> blocks.py:6 nn.ConvTranspose2d(c, c, 4)"}),
    "factory-function": ({"resnet.py": """
        import torch.nn as nn

        class ResNet(nn.Module):
            def __init__(self, depth):
                super().__init__()
                self.conv1 = nn.Conv2d(3, 16, 3)

        def resnet20():
            return ResNet(20)
        """, "train.py": "import resnet\nmodel = resnet.resnet20()\n"}, {2: "resnet.resnet20 -> resnet.py:6 nn.Conv2d(3, 16, 3)"}),
    "torchvision-network-in-a-project-class": ({"models/__init__.py": "", "models/simclr.py": """
        import torch.nn as nn
        import torchvision.models as models

        class ResNetSimCLR(nn.Module):
            def __init__(self, out_dim):
                super().__init__()
                self.backbone = models.resnet18(num_classes=out_dim)
        """, "train.py": "from models.simclr import ResNetSimCLR\nmodel = ResNetSimCLR(128)\n"},
        {2: "ResNetSimCLR -> models/simclr.py:7 models.resnet18(num_classes=out_dim)"}),
    "third-party-model-is-not-the-projects": ({"train.py": """
        import timm
        from torchvision.models import resnet18
        model = timm.create_model("resnet50")
        other = resnet18()
        """}, {}),
    "conv-only-in-a-comment-and-a-string": ({"models.py": """
        import torch.nn as nn

        # a Conv2d stem would go here: nn.Conv2d(3, 8, 3)
        class Net(nn.Module):
            \"\"\"Not a nn.Conv2d network.\"\"\"
            def __init__(self):
                super().__init__()
                self.kind = "nn.Conv2d(3, 8, 3)"
                self.fc = nn.Linear(8, 10)
        """, "train.py": "from models import Net\nmodel = Net()\n"}, {}),
    "unresolvable-import": ({"train.py": "from missing_models import Net\nmodel = Net()\n"}, {}),
    "cycle-of-star-imports": ({"a.py": "from b import *\n", "b.py": "from a import *\n",
                               "train.py": "from a import *\nmodel = Net()\n"}, {}),
    "cycle-of-imports-and-bases": ({"a.py": """
        import torch.nn as nn
        from b import B

        class A(B):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(1, 1, 1)
        """, "b.py": """
        from a import A

        class B(A):
            pass
        """, "train.py": "from a import A\nfrom b import B\nmodel = B()\n"},
        {2: "A -> a.py:7 nn.Conv2d(1, 1, 1)"}),
    "forward-applies-a-functional-convolution": ({"ops.py": """
        import torch.nn.functional as F


        def conv2d(x, weight):
            return F.conv2d(x, weight)
        """, "model.py": """
        import torch
        import torch.nn as nn
        import ops


        class ModulatedConv(nn.Module):
            def __init__(self):
                super().__init__()
                self.weight = nn.Parameter(torch.randn(8, 3, 3, 3))

            def forward(self, x):
                return ops.conv2d(x, self.weight)


        class Generator(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = ModulatedConv()

            def forward(self, x):
                return self.conv(x)
        """, "train.py": "from model import Generator\nfrom swagan import Generator\nmodel = Generator()\n"},
        {2: "Generator -> ops.py:5 F.conv2d(x, weight)"}),
    "a-function-that-applies-a-convolution-builds-none": ({"ops.py": """
        import torch.nn.functional as F


        def blur(x, kernel):
            return F.conv2d(x, kernel)
        """, "train.py": "from ops import blur\nimages = blur(images, kernel)\n"}, {}),
    "looked-up-by-name-in-a-module-whose-all-builds-convolutions": ({"resnet.py": """
        import torch.nn as nn
        __all__ = ["ResNet", "resnet20"]


        class ResNet(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(3, 16, 3)


        def resnet20():
            return ResNet()


        def test(net):
            return sum(p.numel() for p in net.parameters())
        """, "train.py": "import resnet\nmodel = resnet.__dict__[args.arch]()\n"},
        {2: "resnet -> resnet.py:8 nn.Conv2d(3, 16, 3)"}),
    "looked-up-by-name-in-a-module-with-an-mlp": ({"models.py": MODELS.replace(
        "import torch.nn as nn", "import torch.nn as nn\n    __all__ = ['Net', 'MLP']"),
        "train.py": "import models\nmodel = getattr(models, args.arch)()\n"}, {}),
    "looked-up-by-name-in-a-module-without-all": ({"models.py": MODELS,
        "train.py": "import models\nmodel = models.__dict__[args.arch]()\n"}, {}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_project_convolutions(tmp_path, name):
    files, *script, expected = CASES[name]
    write(tmp_path, files)
    assert convolutions(tmp_path, *script) == expected


def test_a_project_module_without_any_convolution_word_is_not_parsed(tmp_path):
    """The text-level gate: no module the script reaches names a convolution, so no summary is asked."""
    write(tmp_path, {"models.py": MODELS.replace("Conv2d(3, 8, 3)", "Linear(3, 8)"),
                     "train.py": "from models import Net\nmodel = Net()\n"})
    project = ProjectModules(tmp_path)
    source = (tmp_path / "train.py").read_text()
    index = SyntaxIndex(ast.parse(source), source, path=str(tmp_path / "train.py"), project=project)
    assert ast_project_convolutions(index) == frozenset()
    assert str(tmp_path / "models.py") not in project.summaries.consulted(tmp_path / "train.py")


def test_without_a_project_the_precheck_cannot_say_no():
    source = "from models import Net\nmodel = Net()\n"
    assert ast_project_convolutions(SyntaxIndex(ast.parse(source), source)) == frozenset({1, 2, 3})


@pytest.mark.parametrize("text", [
    "from models import *\n",
    "from models import (\n    Net,  # the conv net\n    Other,\n)\n",
    "import pkg.sub\n",
    "from . import models\n",
])
def test_mentions_reach_star_grouped_and_parent_imports(tmp_path, text):
    """The text-level gate follows the imports the resolver follows: `from m import *`, a
    parenthesized list over several lines, the package that `import a.b` binds, and the package
    of `from . import m` (the word is only in models.py and in pkg/__init__.py)."""
    write(tmp_path, {"models.py": "import torch.nn as nn\nNet = nn.Conv2d\n", "pkg/__init__.py": "Conv = 1\n",
                     "pkg/sub.py": "thing = 1\n", "__init__.py": "from models import *\n", "train.py": text})
    assert ProjectModules(tmp_path).mentions(str(tmp_path / "train.py"), "Conv")
    assert not ProjectModules(tmp_path).mentions(str(tmp_path / "train.py"), "empty_cache")


# --- the rules --------------------------------------------------------------------------------------

SCRIPT = """
import torch
{imports}

model = {model}.cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
{scaler}

if __name__ == "__main__":
    for images, labels in loader:
        {autocast}loss = torch.nn.functional.cross_entropy(model(images.cuda()), labels.cuda())
        loss.backward()
        optimizer.step()
"""
AMP = {"scaler": "scaler = torch.amp.GradScaler('cuda')",
       "autocast": "with torch.autocast('cuda', dtype=torch.float16):\n            "}
FP32 = {"scaler": "", "autocast": ""}


def script(imports: str, model: str, amp: bool = False, extra: str = "") -> str:
    return extra + SCRIPT.format(imports=imports, model=model, **(AMP if amp else FP32))


def lint(root: Path, source: str, prechecks: bool = True, monkeypatch=None) -> list:
    path = root / "train.py"
    path.write_text(source, encoding="utf-8")
    settings = resolve_settings(root, isolated=True, select=["TL402", "TL403"])
    if not prechecks:
        monkeypatch.setattr(engine, "_prechecked", lambda rules, *args, **kwargs: rules)
    return engine.lint_source(source, str(path), settings)


RULE_CASES = {
    # the bad: a conv model of the project's, in each spelling
    "from-import": (MODELS, script("from models import Net", "Net()"), ["TL402"]),
    "star-import": (MODELS, script("from models import *", "Net()"), ["TL402"]),
    "module-attribute": (MODELS, script("import models", "models.Net()"), ["TL402"]),
    "amp": (MODELS, script("from models import Net", "Net()", amp=True), ["TL402", "TL403"]),
    # the good: what is not a conv model of the project's, or a script that is not the rule's
    "no-convolution": (MODELS, script("from models import MLP", "MLP()"), []),
    "star-import-of-an-mlp": (MODELS, script("from models import *", "MLP()"), []),
    "third-party": (MODELS, script("import timm", "timm.create_model('resnet50')"), []),
    "unresolvable": (MODELS, script("from elsewhere import Net", "Net()"), []),
    "conv-in-a-comment": (MODELS.replace("nn.Conv2d(3, 8, 3)", "nn.Linear(3, 8)  # was nn.Conv2d(3, 8, 3)"),
                          script("from models import Net", "Net()"), []),
    "already-set": (MODELS, script("from models import Net", "Net()",
                                   extra="import torch\ntorch.backends.cudnn.benchmark = True\n"), []),
    "variable-shapes": (MODELS, script("from models import Net\nfrom torch.nn.utils.rnn import pad_sequence", "Net()"),
                        []),
    "conv1d-without-channels-last": (MODELS.replace("Conv2d", "Conv1d"), script("from models import Net", "Net()",
                                                                                 amp=True), ["TL402"]),
    "cpu-only": (MODELS, script("from models import Net", "Net()").replace(".cuda()", ""), []),
}


@pytest.mark.parametrize("name", sorted(RULE_CASES))
def test_rules_read_the_projects_models(tmp_path, monkeypatch, name):
    models, source, expected = RULE_CASES[name]
    write(tmp_path, {"models.py": models})
    found = lint(tmp_path, source)
    assert sorted(d.code for d in found) == expected
    assert lint(tmp_path, source, prechecks=False, monkeypatch=monkeypatch) == found  # the prechecks hide nothing


def test_the_finding_names_the_module_and_points_into_it(tmp_path):
    write(tmp_path, {"models.py": MODELS})
    [finding] = lint(tmp_path, script("from models import Net", "Net()"))
    assert finding.code == "TL402" and finding.line == 9  # the training loop
    assert finding.message.endswith("; the convolutions are built by the project's `Net` (`nn.Conv2d(3, 8, 3)`, "
                                    "models.py:7)")
    [place] = finding.related
    assert (Path(place.path), place.line, place.message) == (tmp_path / "models.py", 6,
                                                             "a convolution of the model is built here")
    assert finding.fix is not None  # the setting is added to the script, as for a model of its own


def test_what_building_a_class_runs(tmp_path):
    """``Summaries.runs``: a class runs the ``__init__`` of each class of the project in its method
    resolution order (``super().__init__()`` reaches them); a function runs itself; an import is
    resolved whatever else the file binds to its name; anything else runs nothing known."""
    write(tmp_path, {"base.py": "class Base:\n    def __init__(self):\n        pass\n",
                     "models.py": "from base import Base\n\nclass Mid(Base):\n    pass\n\n"
                                  "class Net(Mid):\n    def __init__(self):\n        super().__init__()\n\n"
                                  "def build():\n    return Net()\n",
                     "train.py": "import models\nfrom models import Net\nNet = None\n"})
    summaries = ProjectModules(tmp_path).summaries
    train = str(tmp_path / "train.py")

    def runs(name, scope=None):
        return [(Path(s.path).name, s.qualname) for s in summaries.runs(train, name, scope)]

    assert runs("models.Net") == [("models.py", "Net.__init__"), ("base.py", "Base.__init__")]
    assert runs(Import("models", "Net")) == [("models.py", "Net.__init__"), ("base.py", "Base.__init__")]
    assert runs("models.build") == [("models.py", "build")]
    assert runs("Net") == []  # bound twice in train.py: unknown
    assert runs("models.Missing") == [] and runs("torch.nn.Conv2d") == []
