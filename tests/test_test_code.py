"""What applies to test code (issue 15: 57 findings in one project's tests/): performance advice
does not (a test's speed is not the point), correctness, deprecation and migration findings do.
Test code is a file where test runners look (a test_*.py or *_test.py that holds a test, conftest.py,
a tests/ folder),
a test_* function that nothing in its file calls, or a unittest TestCase's method."""

from __future__ import annotations

from torchlint.config import resolve_settings
from torchlint.engine import lint_source

SOURCE = """\
import torch
import unittest

device = torch.device("cuda")


def {name}(model, loader, optimizer):
    losses = []
    for x, y in loader:
        mask = torch.zeros(8).cuda()
        loss = model(x.to(device), y.to(device))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss)
        torch.cuda.empty_cache()
    w = torch.randn(3, requires_grad=True).cuda()
"""


def codes(tmp_path, path: str, name: str = "train") -> list[str]:
    settings = resolve_settings(tmp_path, isolated=True, select=["ALL"])
    return sorted({d.code for d in lint_source(SOURCE.format(name=name), str(tmp_path / path), settings)})


def test_a_training_file_gets_everything(tmp_path):
    assert codes(tmp_path, "train.py") == ["TL101", "TL102", "TL201", "TL801"]


def test_a_test_file_gets_no_performance_advice(tmp_path):
    # TL101 (memory grows) and TL102 (a tensor that never trains) are correctness bugs in a test too
    for path in ("test_train.py", "train_test.py", "tests/helpers.py", "conftest.py"):
        assert codes(tmp_path, path) == ["TL101", "TL102"], path


def test_a_test_function_in_a_module_is_test_code_unless_the_file_calls_it(tmp_path):
    assert codes(tmp_path, "train.py", name="test_training") == ["TL101", "TL102"]
    called = SOURCE.format(name="test_net") + "\n\ntest_net(None, [], None)\n"
    settings = resolve_settings(tmp_path, isolated=True, select=["ALL"])
    assert sorted({d.code for d in lint_source(called, str(tmp_path / "eval.py"), settings)}) == [
        "TL101", "TL102", "TL201", "TL801"]


def test_a_file_named_like_a_test_that_holds_none_is_a_program(tmp_path):
    # `feature_extraction_test.py`: an evaluation protocol named "test", no test a runner collects
    program = SOURCE.format(name="train").replace("import unittest\n", "")
    settings = resolve_settings(tmp_path, isolated=True, select=["ALL"])
    for path in ("train_test.py", "test_train.py"):
        assert sorted({d.code for d in lint_source(program, str(tmp_path / path), settings)}) == [
            "TL101", "TL102", "TL201", "TL801"], path
    for path in ("tests/train.py", "conftest.py"):  # where runners look whatever the file holds
        assert sorted({d.code for d in lint_source(program, str(tmp_path / path), settings)}) == [
            "TL101", "TL102"], path
