"""TL401 bias-before-norm across the project's helpers and layer lists (issue 12, shape 3): a conv
returned by a helper of another module, or run by a module of another file whose forward returns
its output (tacotron2's ConvNorm), feeds a BatchNorm; the finding is at the call and points
into the helper. Its fix passes `False` to the helper's own bias parameter when it has one; without
one, there is no fix (it would belong in the helper, which other callers may use without a norm).
The prechecks must not hide it."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from torchlint import engine
from torchlint.config import resolve_settings

LAYERS = """
    import torch.nn as nn


    def conv3x3(in_planes, out_planes, stride=1, bias=True):
        return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=1, bias=bias)


    def conv1x1(in_planes, out_planes):
        return nn.Conv2d(in_planes, out_planes, kernel_size=1, bias=False)


    def conv5x5(in_planes, out_planes):
        return nn.Conv2d(in_planes, out_planes, kernel_size=5, padding=2)


    class ConvNorm(nn.Module):
        def __init__(self, in_channels, out_channels, kernel_size=1, bias=True):
            super().__init__()
            self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, bias=bias)

        def forward(self, signal):
            conv_signal = self.conv(signal)
            return conv_signal


    class ConvAct(nn.Module):
        def __init__(self, in_channels, out_channels):
            super().__init__()
            self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1)
            self.act = nn.ReLU()

        def forward(self, x):
            return self.act(self.conv(x))


    class ConvPlain(nn.Module):
        def __init__(self, in_channels, out_channels):
            super().__init__()
            self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1)

        def forward(self, x):
            return self.conv(x)


    class ConvEither(nn.Module):
        def __init__(self, in_channels, out_channels, wide=False):
            super().__init__()
            if wide:
                self.conv = nn.Conv2d(in_channels, out_channels, 5, padding=2)
            else:
                self.conv = nn.Identity()

        def forward(self, x):
            return self.conv(x)
"""

MODEL = """
    import torch.nn as nn

    from layers import ConvAct, ConvEither, ConvNorm, ConvPlain, conv1x1, conv3x3, conv5x5


    class Block(nn.Module):
        def __init__(self, planes):
            super().__init__()
            self.conv1 = {first}
            self.bn1 = nn.BatchNorm2d(planes)

        def forward(self, x):
            return self.bn1(self.conv1(x))
"""

CASES = {  # the call, and what the fix makes of it (None: reported without a fix; "": not reported)
    "helper-default-bias": ("conv3x3(planes, planes)", "conv3x3(planes, planes, bias=False)"),
    "helper-bias-passed-true": ("conv3x3(planes, planes, 1, True)", "conv3x3(planes, planes, 1, False)"),
    "helper-bias-passed-false": ("conv3x3(planes, planes, bias=False)", ""),
    "helper-without-bias": ("conv1x1(planes, planes)", ""),
    "helper-without-a-bias-parameter": ("conv5x5(planes, planes)", None),
    # a module of the project whose forward returns its conv's output, as tacotron2's ConvNorm does
    "module-default-bias": ("ConvNorm(planes, planes)", "ConvNorm(planes, planes, bias=False)"),
    "module-bias-passed-true": ("ConvNorm(planes, planes, 1, True)", "ConvNorm(planes, planes, 1, False)"),
    "module-bias-passed-false": ("ConvNorm(planes, planes, bias=False)", ""),
    "module-activation-after-the-conv": ("ConvAct(planes, planes)", ""),
    "module-without-a-bias-parameter": ("ConvPlain(planes, planes)", None),
    "module-assigns-the-attribute-twice": ("ConvEither(planes, planes, wide=True)", ""),
}


def built_line(first: str) -> int:
    """The 0-based line of layers.py where the helper or module that ``first`` calls builds its conv."""
    lines = textwrap.dedent(LAYERS).lstrip().splitlines()
    name = first.split("(", 1)[0]
    start = next(n for n, line in enumerate(lines) if line.startswith((f"def {name}(", f"class {name}(")))
    return next(n for n in range(start, len(lines)) if "nn.Conv2d(" in lines[n])


def lint(root: Path, first: str, prechecks: bool = True, monkeypatch=None) -> list:
    (root / "layers.py").write_text(textwrap.dedent(LAYERS).lstrip(), encoding="utf-8")
    source = textwrap.dedent(MODEL).lstrip().format(first=first)
    path = root / "model.py"
    path.write_text(source, encoding="utf-8")
    if not prechecks:
        monkeypatch.setattr(engine, "_prechecked", lambda rules, *args, **kwargs: rules)
    return engine.lint_source(source, str(path), resolve_settings(root, isolated=True, select=["TL401"]))


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_helper_of_another_module_that_returns_a_biased_conv(tmp_path, monkeypatch, name):
    first, fixed = CASES[name]
    found = lint(tmp_path, first)
    assert len(found) == (fixed != "")
    assert lint(tmp_path, first, prechecks=False, monkeypatch=monkeypatch) == found  # the prechecks hide nothing
    if found:
        [finding] = found
        assert finding.line == 8  # 0-based: `self.conv1 = ...`
        built = built_line(first)  # 0-based, as LSP's
        subject = f"this `{first.split('(')[0]}` module returns the output of a" if first[0].isupper() else \
            "this call returns a"
        assert f"{subject} `Conv2d` whose bias is cancelled by the BatchNorm that follows it (built at layers.py:" \
               f"{built + 1})" in finding.message
        [place] = finding.related
        assert (Path(place.path).name, place.line) == ("layers.py", built)
        assert (finding.fix and finding.fix.edits[0].text) == fixed
