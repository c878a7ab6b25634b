"""
## What it does

Finds a training script that switches on deterministic computation unconditionally:
`torch.backends.cudnn.deterministic = True` or `torch.use_deterministic_algorithms(True)` (any
import spelling, `warn_only=True` included). Off by default: reproducibility is a legitimate
choice, and the rule only makes sure it is a conscious one.

## Why is it slow

PyTorch's reproducibility notes say it plainly: deterministic operations are often slower than
nondeterministic ones, so single-run performance may decrease. With `cudnn.deterministic = True`
cuDNN may only use its deterministic convolution algorithms, which are often not the fastest for
a given shape, and the benchmark mode (`cudnn.benchmark = True`) can then only choose among
those. `torch.use_deterministic_algorithms(True)` goes further: every operation with a
deterministic alternative switches to it (for example scatter/index-add style backward passes
without atomic adds, cuBLAS with a fixed workspace, which needs `CUBLAS_WORKSPACE_CONFIG`), and
operations without one raise an error. Seeding alone (`torch.manual_seed`) costs nothing; these
switches cost speed on every step, for the whole run.

Keep them for runs that must repeat bit for bit (debugging a divergence, a paper's reported
numbers); leave them off, or behind an option, for ordinary training.

## Expected gain

No published measurement found: the reproducibility notes say deterministic operations are often
slower, without a figure, and the cost depends on the operations the model uses (convolutions held
to deterministic cuDNN algorithms, scatter and index-add style backward passes without atomic adds).
Run `torchlint verify script.py` with the switch on and off and compare the median step time it
reports.

## Example

```python
torch.manual_seed(0)
torch.backends.cudnn.deterministic = True

model = nn.Conv2d(3, 64, 3).cuda()
for images, labels in loader:
    loss = criterion(model(images.cuda()), labels.cuda())
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
```

## Use instead

```python
torch.manual_seed(0)
if args.deterministic:  # bit-for-bit reproducible runs, at the cost of speed
    torch.backends.cudnn.deterministic = True

model = nn.Conv2d(3, 64, 3).cuda()
for images, labels in loader:
    loss = criterion(model(images.cuda()), labels.cuda())
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
```

## Fix safety

No fix: whether a run must be reproducible is the author's decision. The rule reports only a
literal `True`, in a file that trains (a training loop, or a Lightning/Hugging Face `Trainer`)
and runs as a program (an `if __name__ == "__main__":` block, a training loop outside any
function, or a notebook); seed helpers in modules that such scripts import are not seen. It stays
silent for `False` and for values that are not literals (`cudnn.deterministic =
args.deterministic`), under an `if` or a conditional expression (an option the user chose;
`if __name__ == "__main__":` and `if torch.cuda.is_available():` excepted), in code for other
torch versions, and in tests. The cuDNN auto-tuner rule (`cudnn-benchmark`) never advises
`cudnn.benchmark = True` in a file that sets deterministic mode, so the two never contradict each
other.

## References

- https://pytorch.org/docs/stable/notes/randomness.html
- https://pytorch.org/docs/stable/notes/randomness.html#cuda-convolution-determinism
- https://pytorch.org/docs/stable/generated/torch.use_deterministic_algorithms.html
- https://pytorch.org/docs/stable/backends.html#torch.backends.cudnn.deterministic
"""

from __future__ import annotations

from torchlint.analysis.programs import ast_is_script
from torchlint.analysis.reproducibility import ast_switches_deterministic_on, deterministic_value
from torchlint.analysis.syntax import is_main_guard
from torchlint.lazy import libcst as cst
from torchlint.rule import Rule, SyntaxIndex

# Words that show a file trains through a framework's loop rather than one of its own.
FRAMEWORK_TRAINING = ("Trainer(", ".fit(", "training_step")
CUDA_AVAILABLE = "torch.cuda.is_available"


class DeterministicAlgorithms(Rule):
    code = "TL409"
    name = "deterministic-algorithms"
    kind = "performance"
    summary = "Deterministic algorithms switched on for a whole training run (reproducible, but slower)"
    triggers = ("deterministic",)
    default_enabled = False

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        return ast_switches_deterministic_on(index) and (ast_is_script(index)
                                                         or (index.path or "").endswith(".ipynb"))

    def visit_Assign(self, node: cst.Assign) -> None:
        self._check(node, "`torch.backends.cudnn.deterministic = True` limits cuDNN to its deterministic algorithms")

    def visit_Call(self, node: cst.Call) -> None:
        self._check(node, "`torch.use_deterministic_algorithms(True)` makes every operation use its deterministic "
                          "implementation")

    def _check(self, node: cst.Assign | cst.Call, what: str) -> None:
        if deterministic_value(node, self.ctx.bindings) != (True, True) or not self._unconditional() \
                or not self._training_script() or self.ctx.compat.in_fallback():
            return
        self.report(node, f"{what} for the whole training run: results repeat bit for bit, but steps are often "
                          "slower; keep it only for runs that must be reproducible, or put it behind an option")

    def _unconditional(self) -> bool:
        """Not under an ``if``/``else`` or a conditional expression (a choice the user makes per
        run), other than ``if __name__ == "__main__":`` and ``if torch.cuda.is_available():`` (which
        asks what the machine has, not what the user wants)."""
        for parent in self.ctx.ancestors[:-1]:
            if isinstance(parent, cst.IfExp) or isinstance(parent, cst.Else):
                return False
            if isinstance(parent, cst.If) and not is_main_guard(parent) \
                    and not (isinstance(parent.test, cst.Call) and not parent.test.args
                             and self.ctx.qualified_name(parent.test.func) == CUDA_AVAILABLE):
                return False
        return True

    def _training_script(self) -> bool:
        """The file runs as a program (a notebook runs top to bottom too) and trains: a training
        loop of its own, or a framework's."""
        if not (self.ctx.programs.is_script or self.ctx.path.endswith(".ipynb")):
            return False
        return bool(self.ctx.loops.training_loops) or any(word in self.ctx.code for word in FRAMEWORK_TRAINING)
