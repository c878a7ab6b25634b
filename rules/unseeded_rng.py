"""
## What it does

Finds a training script that seeds torch (`torch.manual_seed`, `torch.cuda.manual_seed_all`)
but draws from NumPy's global generator (`np.random.shuffle`, `np.random.rand`...) or from the
`random` module (`random.random`, `random.choice`...) without seeding it (`np.random.seed`,
`random.seed`, or a helper that seeds everything: Lightning's `seed_everything`, transformers'
`set_seed`, a function of the file that calls the seeds). A draw that only picks a seed
(`torch.manual_seed(random.randint(0, 2**63))`, `data_seed = random.randint(0, 2**50)`: a fresh
run on purpose) does not count. Off by
default: a reproducibility note, not a speed rule.

## Why is it wrong

torch, NumPy and `random` each keep their own generator; seeding one leaves the others drawing
from a seed taken from the operating system. A script that calls `torch.manual_seed(0)` asks for
runs that can be repeated, yet a shuffle, an augmentation or a sample drawn with NumPy or `random`
differs on every run, so two runs of the same code give different results and a change cannot
be told apart from noise (PyTorch's notes on reproducibility: "you must also seed" NumPy and
`random` when the code uses them).

## Example

```python
import random

torch.manual_seed(0)
random.shuffle(samples)
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
```

## Use instead

```python
import random

torch.manual_seed(0)
random.seed(0)
random.shuffle(samples)
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
```
or draw from a generator made from the seed (`np.random.default_rng(seed)`,
`random.Random(seed)`).

## Fix safety

The fix seeds the generator with the same value right after the `torch.manual_seed(...)` call.
It is unsafe: the draws change (they become the same on every run), so the results do too. It is
offered when the torch seed is a statement of its own and its value a name or a constant. Draws
made inside a `Dataset`'s `__getitem__` or `__iter__` run in the DataLoader's worker processes,
which seed `random` from torch's seed, and NumPy too since torch 1.9 (pytorch#56488): they are
not reported, except NumPy's when the target torch is older than 1.9. (With `num_workers=0` they
run in the main process, unseeded; the rule cannot tell.) Draws from a
generator object (`rng.random()`, `np.random.default_rng(0)`) are seeded by their construction;
files that call a seeding helper of another module (`set_seed`, `seed_everything`,
`init_seeds`...) are taken as seeded; test code is left out.

## References

- https://pytorch.org/docs/stable/notes/randomness.html
- https://numpy.org/doc/stable/reference/random/generated/numpy.random.seed.html
- https://docs.python.org/3/library/random.html#random.seed
- https://pytorch.org/docs/stable/data.html#randomness-in-multi-process-data-loading
- https://github.com/pytorch/pytorch/pull/56488
"""

from __future__ import annotations

import re

from torchlint.analysis.flow import function_of_call, path_to
from torchlint.analysis.loops import ast_training_loop_lines
from torchlint.analysis.syntax import bare_call, dotted_name, positional_args, target_names
from torchlint.analysis.walk import walk
from torchlint.lazy import libcst as cst
from torchlint.rule import Rule, Severity, SyntaxIndex

TORCH_SEEDS = frozenset({"torch.manual_seed", "torch.random.manual_seed", "torch.cuda.manual_seed",
                         "torch.cuda.manual_seed_all"})
# generator -> (the module whose functions draw from it, its seed, what is not a draw)
GENERATORS = {
    "NumPy's global generator": ("numpy.random", "numpy.random.seed",
              frozenset({"seed", "default_rng", "RandomState", "Generator", "SeedSequence", "get_state", "set_state",
                         "PCG64", "MT19937", "Philox", "SFC64", "BitGenerator"})),
    "the `random` module's generator": ("random", "random.seed",
               frozenset({"seed", "getstate", "setstate", "Random", "SystemRandom", "getrandbits"})),
}
# Helpers that seed every generator by their name (Lightning, transformers, Accelerate, YOLO's...).
SEED_HELPER = re.compile(r"seed_everything|set_seed|set_random_seed|seed_all|init_seeds|fix_seed|setup_seed|"
                         r"random_seed|seed_torch|set_seeds|seed_worker|same_seeds", re.IGNORECASE)
WORKER_METHODS = frozenset({"__getitem__", "__iter__", "__getitems__"})


class UnseededRng(Rule):
    code = "TL808"
    name = "unseeded-rng"
    kind = "correctness"
    quiet_in_tests = True  # a test seeds what it checks
    summary = "A training script that seeds torch but draws from NumPy or `random` unseeded"
    severity = Severity.INFORMATION
    fix_applicability = "unsafe"
    default_enabled = False
    example_prelude = Rule.example_prelude + "import numpy as np\n"

    @classmethod
    def applies(cls, text: str) -> bool:
        return "manual_seed" in text and "random" in text and "backward" in text

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        # leave_Module needs a training loop (see Loops.training_loops)
        return bool(index.calls("manual_seed", "manual_seed_all")) and any(ast_training_loop_lines(index))

    def leave_Module(self, original_node: cst.Module) -> None:
        if not self.ctx.loops.training_loops:
            return
        calls = _Calls(self.ctx)
        calls.collect(original_node)
        if not calls.torch_seeds or calls.seeds_everything:
            return
        for generator, (module, seed, _) in GENERATORS.items():
            if seed in calls.seeded or not calls.draws.get(generator):
                continue
            draw = calls.draws[generator][0]
            func = draw.func
            written = f"{self.ctx.code_for(func.value)}.seed" if type(func) is cst.Attribute else seed
            self.report(draw, f"`{self.ctx.code_for(func)}` draws from {generator}, which this script never seeds "
                              f"although it seeds torch: runs differ; call `{written}(...)` beside "
                              "`torch.manual_seed(...)`", self._fix(calls.torch_seeds[0], module))

    def _fix(self, torch_seed: cst.Call, module: str):
        chain = path_to(self.ctx.module, torch_seed) or []
        statement = next((node for node in chain if bare_call(node) is torch_seed), None)
        args = positional_args(torch_seed)
        if statement is None or len(args) != 1 or not isinstance(args[0].value, (cst.Name, cst.Integer, cst.Attribute)):
            return None
        indent = "".join(self.ctx.module.default_indent if block.indent is None else block.indent
                         for block in chain if type(block) is cst.IndentedBlock)
        fix = self.fix_builder(f"Seed `{module}` with the torch seed")
        local = fix.ensure_import(module.split(".")[0])
        if local is None:
            return None
        value = self.ctx.code_for(args[0].value)
        call = f"{local}.random.seed({value})" if module == "numpy.random" else f"{local}.seed({value})"
        fix.add(self.insert_lines_after(statement, f"{indent}{call}\n"))
        return fix.build()


class _Calls:
    """The torch seeds, the seeds of the other generators and their draws in a file."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.torch_seeds: list[cst.Call] = []
        self.seeded: set[str] = set()
        self.seeds_everything = False
        self.draws: dict[str, list[cst.Call]] = {}

    def collect(self, tree: cst.CSTNode) -> None:
        seeds = {seed for _, seed, _ in GENERATORS.values()}

        # NumPy is seeded in the DataLoader's workers since torch 1.9, `random` on every version
        workers_seed = {generator for generator, (module, _, _) in GENERATORS.items()
                        if module != "numpy.random" or self.ctx.torch_at_least("1.9")}
        in_worker = []  # the worker methods the walk is in
        seeding = []  # the seed calls the walk is in: a draw there picks a seed (`manual_seed(random.randint(...))`)

        def on_leave(node: cst.CSTNode) -> None:
            if in_worker and in_worker[-1] is node:
                in_worker.pop()
            if seeding and seeding[-1] is node:
                seeding.pop()

        def on_visit(node: cst.CSTNode) -> bool:
            if type(node) is cst.FunctionDef and node.name.value in WORKER_METHODS:
                in_worker.append(node)
            if type(node) is cst.Assign and any("seed" in name.lower() for target in node.targets
                                                for name in target_names(target.target)):
                seeding.append(node)  # `data_seed = random.randint(0, 2**50)`: a seed drawn on purpose
            if type(node) is not cst.Call:
                return True
            qualified = self.ctx.bindings.qualified_name(node.func)
            if qualified in TORCH_SEEDS:
                self.torch_seeds.append(node)
                seeding.append(node)
            elif qualified in seeds:
                self.seeded.add(qualified)
                seeding.append(node)
            elif qualified is not None and not seeding:
                self._draw(node, qualified, workers_seed if in_worker else set())
            name = qualified or dotted_name(node.func) or ""
            # a seeding helper of another module (one of the file's own is read like the rest)
            if SEED_HELPER.search(name.rsplit(".", 1)[-1]) and function_of_call(node, self.ctx.bindings) is None:
                self.seeds_everything = True
            return True

        walk(tree, on_visit, on_leave)

    def _draw(self, call: cst.Call, qualified: str, seeded_here: set[str]) -> None:
        """Count a draw from a global generator, unless a DataLoader worker seeds it there."""
        module, _, function = qualified.rpartition(".")
        for generator, (drawing, _, not_draws) in GENERATORS.items():
            if module == drawing and function not in not_draws and not function.startswith("_") \
                    and generator not in seeded_here:
                self.draws.setdefault(generator, []).append(call)
