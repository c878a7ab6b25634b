"""
## What it does

Finds scaled dot-product attention written by hand,
`softmax(q @ k.transpose(-2, -1) / sqrt(d)) @ v`, in one expression or through the names of one
function (`scores = q @ k.transpose(-2, -1)`; `scores = scores * scale`;
`attn = scores.softmax(dim=-1)`; `out = attn @ v`), with `torch.matmul`/`torch.bmm` or `@`, any
softmax over the last dimension (`F.softmax`, `torch.softmax`, `.softmax(-1)`, an
`nn.Softmax(dim=-1)` layer), and optionally a mask (`masked_fill(mask, float("-inf"))` or an added
bias) before the softmax and a dropout (`F.dropout`, an `nn.Dropout` layer) after it. It reports
the final product with the values.

Files that already use fused attention somewhere (`scaled_dot_product_attention`, FlashAttention,
xFormers, `flex_attention`, a Hugging Face `_attn_implementation` switch) are left alone: there
the hand-written path is a deliberate fallback (to return the weights, or for old versions), as is
code in a branch that tests a version or whether a function exists.

## Why is it slow

The hand-written form materializes the whole `L x S` matrix of scores for every head, then reads
and writes it again for the mask, the softmax and the dropout: memory that grows with the square
of the sequence length, and several passes over it. `F.scaled_dot_product_attention` (torch 2.0
and later) dispatches to fused kernels (FlashAttention, memory-efficient attention, cuDNN) that
compute the softmax block by block without ever storing the matrix; PyTorch's SDPA tutorial
measures several times the speed of the explicit form on a GPU, with far less memory, which also
allows longer sequences or larger batches.

## Expected gain

Large on GPUs, more so for long sequences. A small GPT on an A100 went from 55,256 to 91,901
tokens/s and from 11.56 to 5.90 GB reserved when its attention moved to
`scaled_dot_product_attention` (https://github.com/rasbt/LLMs-from-scratch/tree/main/ch05/10_llm-training-speed).
The FlashAttention paper reports 3x for GPT-2 training at length 1K (https://arxiv.org/abs/2205.14135),
its README 10x (2K) to 20x (4K) less attention memory (https://github.com/Dao-AILab/flash-attention).
`torchlint verify --each --unsafe-fixes --imports script.py` measures it on your machine.
`--imports` is there because attention usually sits in a model module the script imports, not in
the script. On the zoo's character-level minGPT (bench/zoo/mingpt_chargpt, a tiny model, 20 steps),
an H100 ran the fixed `mingpt/model.py` at 0.73x the step time and 0.98x the peak memory. Its loss
stayed within the run-to-run tolerance. It moved by 0.28%, because the fused kernel draws its
dropout mask from other random numbers (bench/results/verify-zoo-gpu.md).

## Example

```python
def attention(q, k, v, mask):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    scores = scores.masked_fill(mask == 0, float("-inf"))
    return F.softmax(scores, dim=-1) @ v
```

## Use instead

```python
def attention(q, k, v, mask):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask != 0, scale=1 / math.sqrt(q.size(-1)))
```

## Fix safety

Unsafe: the fused kernels round differently (results match to floating-point tolerance, not bit
for bit), draw other random dropout masks, and a row whose every position is masked gives zeros
instead of NaN. The fix is offered only when the mapping is exact in every other respect, for a
target torch from 2.1 (which added `scale=`), and otherwise the finding says why there is none:

- the keys are transposed over their last two dimensions (`transpose(-2, -1)`, `.mT`): with
  `transpose(2, 3)`, `permute` or `.T` that depends on the tensor's rank;
- the softmax runs over the last dimension in the scores' own precision (not with `dtype=` or
  between `.float()` and `.type_as(...)`);
- the scale is a number (a literal, a `math` function, a power such as `head_dim ** -0.5`, or a
  name bound only to such values), passed as `scale=` (`scale=1.0` when there is none, since SDPA
  would otherwise divide by the square root of the head size); a tensor scale is not;
- a `masked_fill(cond, -inf)` becomes the boolean `attn_mask=~cond` (`mask == 0` becomes
  `mask != 0`), an added bias the float `attn_mask` when it is added after the scale; a fill of a
  large negative number (`-1e9`, `finfo.min`) is not mapped;
- a dropout becomes `dropout_p=p if training else 0.0` (`F.dropout`'s `training=`, an
  `nn.Dropout` layer's own `.p` and `.training`);
- the names in between are assigned once, alone on their lines, in the same block, and used for
  nothing else: when the weights are returned, stored or logged, the attention is reported
  without a fix, since SDPA does not return them.

When the code writes the query, key or value with another number of dimensions than 4 (an
einops pattern such as `"b p n (h d) -> b p h n d"`, a `.view(...)` with its sizes, an
`nn.Parameter(torch.randn(n, d))`), the finding says to reshape them to (batch, heads, tokens,
features) first, and there is no fix: the fused kernels take only 4-D inputs, and on others SDPA
runs the same unfused computation.

## Versions

Reported for a target torch from 2.0, the first with `F.scaled_dot_product_attention`; fixed for
2.1 and later.

## References

- https://pytorch.org/docs/stable/generated/torch.nn.functional.scaled_dot_product_attention.html
- https://pytorch.org/tutorials/intermediate/scaled_dot_product_attention_tutorial.html
- https://github.com/rasbt/LLMs-from-scratch/tree/main/ch05/10_llm-training-speed
- https://arxiv.org/abs/2205.14135
- https://github.com/Dao-AILab/flash-attention
"""

from __future__ import annotations

import re

from torchlint.analysis.attention import Attention, AttentionFinder, ast_may_be_attention, is_negative_infinity, operand_rank
from torchlint.analysis.syntax import is_literal, names_in, target_names
from torchlint.analysis.walk import Visitor, visit
from torchlint.fixes import NodeEdit, statement_edit
from torchlint.lazy import libcst as cst
from torchlint.rule import Rule, SyntaxIndex

# A file that already runs fused attention somewhere keeps its hand-written path on purpose.
FUSED_ATTENTION = re.compile(r"scaled_dot_product_attention|flash_attn|flash_attention|xformers|"
                             r"memory_efficient_attention|flex_attention|_attn_implementation|"
                             r"ALL_ATTENTION_FUNCTIONS|\bsdpa\b")
SDPA = "scaled_dot_product_attention"
MATMUL_OPERATOR = re.compile(r"[\w)\]][ \t]*@")
FLOAT_CALLS = re.compile(r"^(math|np|numpy)\.\w+$")


class ManualAttention(Rule):
    code = "TL406"
    name = "manual-attention"
    kind = "performance"
    summary = "Attention written by hand (`softmax(q @ k.transpose(-2, -1) * scale) @ v`) instead of SDPA"
    fix_applicability = "unsafe"
    torch_versions = ">=2.0"

    @classmethod
    def applies(cls, text: str) -> bool:
        # `a @ b` (not a decorator: something is written before the `@` on its line)
        return "oftmax" in text and ("matmul" in text or "bmm" in text or MATMUL_OPERATOR.search(text) is not None)

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        if not ast_may_be_attention(index):
            return False
        # a file that already has fused attention gets no finding (see __init__): its code says so
        return not (FUSED_ATTENTION.search(index.source) and FUSED_ATTENTION.search(index.code_words))

    def __init__(self, ctx):
        super().__init__(ctx)
        self.finder = AttentionFinder(ctx.module, ctx.bindings, ctx.ancestors)
        self.skip = bool(FUSED_ATTENTION.search(ctx.code))

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        if isinstance(node.operator, cst.MatrixMultiply):
            self._check(node)

    def visit_Call(self, node: cst.Call) -> None:
        self._check(node)

    def _check(self, node: cst.CSTNode) -> None:
        if self.skip:
            return
        found = self.finder.at(node)
        if found is None or self.ctx.compat.in_fallback():  # the finder first: it is the cheaper test
            return
        code = self.ctx.code_for
        ranks = {operand_rank(part, self.ctx.ancestors, self.ctx.bindings) for part in (found.query, found.key,
                                                                                      found.value)} - {None}
        message = (f"attention written by hand over `{code(found.query)}`, `{code(found.key)}`, `{code(found.value)}` "
                   "builds the whole weight matrix in memory; ")
        if ranks - {4}:
            # SDPA's fused kernels take 4-D (batch, heads, tokens, dim) inputs; on others it runs
            # the same unfused computation, so a rewrite as it stands gains nothing
            shown = "-D, ".join(str(rank) for rank in sorted(ranks)) + "-D"
            self.report(node, message + f"`F.{SDPA}` computes it in one fused kernel for 4-D query, key and value "
                                        f"(batch, heads, tokens, features), and these are {shown}: reshape them "
                                        "first (no fix)")
            return
        fix, why_not = self._fix(found)
        message += f"`F.{SDPA}` computes it in one fused kernel"
        if why_not:
            message += f" (no fix: {why_not})"
        self.report(node, message, fix)

    # the fix ---------------------------------------------------------------------------------------
    def _fix(self, found: Attention):
        """The fix and, when there is none, why."""
        lines = self._straight_line(found)
        if isinstance(lines, str):
            return None, lines
        if not self.ctx.torch_at_least("2.1"):
            return None, "`scale=` needs torch 2.1"
        if not found.key_transposed:
            return None, "the keys are not transposed with `transpose(-2, -1)`, which SDPA assumes"
        if not found.softmax_exact:
            return None, "the softmax runs in another precision"
        arguments = [self._mask(found), self._dropout(found), self._scale(found)]
        for argument in arguments:
            if argument is not None and argument.startswith("!"):
                return None, argument[1:]
        code = self.ctx.code_for
        fix = self.fix_builder(f"Use `F.{SDPA}`")
        function = self._sdpa()
        if function == SDPA:
            function = f"{fix.ensure_import('torch')}.nn.functional.{SDPA}"
        call = self._layout(function, [code(found.query), code(found.key), code(found.value),
                                       *(argument for argument in arguments if argument)], found.output)
        if not lines:
            return fix.replace(found.output, call).build(), None
        return fix.add(self._rewrite_block(found, lines, call)).build(), None

    def _layout(self, function: str, arguments: list[str], replaced: cst.CSTNode) -> cst.BaseExpression:
        """The call on one line, or one argument a line when the statement would grow past 100
        characters (the indentation is relative: LibCST adds the block's)."""
        one_line = f"{function}({', '.join(arguments)})"
        statement = self.ctx.statement_position()[0]
        rendered = self.ctx.code_for(statement.deep_replace(replaced, cst.parse_expression(one_line)))
        indent = sum(len(self.ctx.module.default_indent if block.indent is None else block.indent)
                     for block in self.ctx.ancestors if isinstance(block, cst.IndentedBlock))
        if indent + max(len(line) for line in rendered.strip().splitlines()) <= 100:
            return cst.parse_expression(one_line)
        step = self.ctx.module.default_indent
        return cst.parse_expression(f"{function}(\n" + "".join(f"{step}{a},\n" for a in arguments) + ")")

    def _straight_line(self, found: Attention) -> list[cst.SimpleStatementLine] | str:
        """The statement lines of the intermediate names, when a fix may replace them: each an
        assignment alone on its line, in the block of the final product, used nowhere else.
        Otherwise why not."""
        names, lines, weights = set(), [], set()
        for number, step in enumerate(found.steps):
            line = step.statement
            small = line.body[0] if isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1 else None
            if not isinstance(small, cst.Assign) or len(small.targets) != 1 \
                    or not isinstance(small.targets[0].target, cst.Name):
                return "the steps are not plain assignments"
            names.add(small.targets[0].target.value)
            if number < found.weight_steps:
                weights.add(small.targets[0].target.value)
            if line not in lines:
                lines.append(line)
        if not lines:
            return lines
        position = self.ctx.statement_position()
        if position is None or any(line not in position[1] for line in lines):
            return "the steps are spread over several blocks"
        statement, body, index = position
        if any(line.trailing_whitespace.comment is not None for line in lines):
            return "a comment ends a step's line"
        scope = self.ctx.bindings.scope(self.ctx.enclosing_function() or self.ctx.module)
        local = _references(lines + [found.weights])
        for name in names:
            if scope.references.get(name, 0) != local.get(name, 0) \
                    or len(scope.assigned.get(name, ())) != sum(name in target_names(l.body[0].targets[0].target)
                                                                for l in lines):
                if name in weights:
                    return f"the attention weights (`{name}`) are used elsewhere too, and SDPA does not return them"
                return f"`{name}` is also used outside the attention"
        leaves = set().union(*(names_in(part) for part in self._leaves(found)))
        if leaves & names:
            return "a step is used inside another"
        first = min(body.index(line) for line in lines)
        between = [s for s in body[first:index] if s not in lines]
        if any(names_in(s) & leaves for s in between):
            return "the inputs change between the steps"
        return lines

    def _leaves(self, found: Attention) -> list[cst.CSTNode]:
        parts = [found.query, found.key, found.value]
        if found.mask is not None:
            parts += [p for p in found.mask[1:] if isinstance(p, cst.CSTNode)]
        if found.scale is not None:
            parts.append(found.scale[1])
        if found.dropout is not None:
            parts += [p for p in found.dropout if isinstance(p, cst.CSTNode)]
        return parts

    def _mask(self, found: Attention) -> str | None:
        """``attn_mask=...``, None without a mask, or ``"!why"`` when it cannot be mapped."""
        if found.mask is None:
            return None
        code = self.ctx.code_for
        if found.mask[0] == "add":
            if not found.mask_after_scale:
                return "!the bias is added before the scale"
            return f"attn_mask={code(found.mask[1])}"
        _, condition, value = found.mask
        if not is_negative_infinity(value):
            return f"!the mask fills `{code(value)}`, not `-inf`, which a boolean `attn_mask` means"
        return f"attn_mask={_negated(condition, code)}"

    def _dropout(self, found: Attention) -> str | None:
        if found.dropout is None:
            return None
        p, training = found.dropout
        code = self.ctx.code_for
        if p == "unknown":
            return "!the dropout's arguments cannot be read"
        if training == "module":
            layer = code(p)
            return f"dropout_p={layer}.p if {layer}.training else 0.0"
        if training is None or is_literal(training, True):
            return f"dropout_p={code(p)}"
        if is_literal(training, False):
            return None
        return f"dropout_p={_grouped(p, code)} if {code(training)} else 0.0"

    def _scale(self, found: Attention) -> str:
        if found.scale is None:
            return "scale=1.0"  # SDPA would divide by the square root of the head size
        operator, value = found.scale
        if not self._is_number(value, 0):
            return f"!the scale `{self.ctx.code_for(value)}` may be a tensor, and `scale=` takes a float"
        text = self.ctx.code_for(value)
        return f"scale={text}" if operator == "*" else f"scale=1 / {_grouped(value, self.ctx.code_for)}"

    def _is_number(self, expr: cst.BaseExpression, depth: int) -> bool:
        """Is the expression surely a Python number (a literal, a ``math`` function, a power of a
        size, a name bound only to such values)?"""
        if depth > 3:
            return False
        if isinstance(expr, (cst.Integer, cst.Float)):
            return True
        if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
            return self._is_number(expr.expression, depth)
        if isinstance(expr, cst.Call):
            return bool(FLOAT_CALLS.match(self.ctx.bindings.qualified_name(expr.func) or ""))
        if isinstance(expr, cst.BinaryOperation):
            if isinstance(expr.operator, cst.Power):
                return isinstance(expr.right, (cst.Integer, cst.Float, cst.UnaryOperation)) and _is_dimension(expr.left)
            return self._is_number(expr.left, depth + 1) and self._is_number(expr.right, depth + 1)
        if isinstance(expr, cst.BooleanOperation) and isinstance(expr.operator, cst.Or):
            # `qk_scale or head_dim ** -0.5`: a parameter given for the scale, or a number
            return isinstance(expr.left, cst.Name) and not self.ctx.bindings.values(expr.left.value) \
                and self._is_number(expr.right, depth + 1)
        if isinstance(expr, (cst.Name, cst.Attribute)):
            values = self.ctx.bindings.values(self.ctx.code_for(expr))
            return bool(values) and all(v is not None and self._is_number(v, depth + 1) for v in values)
        return False

    def _sdpa(self) -> str:
        """How the file can name ``torch.nn.functional.scaled_dot_product_attention`` without a
        new import, or ``SDPA`` alone when it cannot."""
        aliases = self.ctx.bindings.imports.aliases
        for local, target in sorted(aliases.items()):
            if self.ctx.bindings.count(local) != 1:
                continue
            if target == "torch.nn.functional":
                return f"{local}.{SDPA}"
        for local, target in sorted(aliases.items()):
            if self.ctx.bindings.count(local) == 1 and target in ("torch", "torch.nn"):
                return f"{local}{'.nn' if target == 'torch' else ''}.functional.{SDPA}"
        return SDPA

    def _rewrite_block(self, found: Attention, lines: list[cst.SimpleStatementLine],
                       call: cst.BaseExpression) -> NodeEdit | None:
        """The edit that drops the steps' lines (their comment lines move to the next line kept)
        and puts ``call`` in place of the final product."""
        statement, body, _ = self.ctx.statement_position()
        kept, comments = [], []
        for line in body:
            if line in lines:
                if any(empty.comment for empty in line.leading_lines):
                    comments += line.leading_lines  # with their blank lines, as they were
                continue
            if line is statement:
                line = line.deep_replace(found.output, call)
            if comments:
                merged = []
                for empty in [*comments, *line.leading_lines]:
                    if empty.comment or not merged or merged[-1].comment:
                        merged.append(empty)  # one blank line between moved comments, not two
                line = line.with_changes(leading_lines=merged)
                comments = []
            kept.append(line)
        ancestors = self.ctx.ancestors
        block = next(node for node in reversed(ancestors) if isinstance(node, (cst.IndentedBlock, cst.Module))
                     and statement in getattr(node, "body", ()))
        if isinstance(block, cst.Module):
            return NodeEdit(block, block.with_changes(body=kept), "replace")
        owner = ancestors[ancestors.index(block) - 1]
        new_owner = owner.deep_replace(block, block.with_changes(body=kept)).with_changes(leading_lines=[])
        return statement_edit(self.ctx, owner, [new_owner])


def _references(nodes: list[cst.CSTNode]) -> dict[str, int]:
    """How often each plain name is written in the nodes, as ``Bindings.scope`` counts them (not
    attribute names or keywords)."""
    counts: dict[str, int] = {}
    skip: set[int] = set()

    class Names(Visitor):
        def visit_Attribute(self, node: cst.Attribute) -> None:
            skip.add(id(node.attr))

        def visit_Arg(self, node: cst.Arg) -> None:
            if node.keyword is not None:
                skip.add(id(node.keyword))

        def visit_Name(self, node: cst.Name) -> None:
            if id(node) not in skip:
                counts[node.value] = counts.get(node.value, 0) + 1

    for node in nodes:
        visit(node, Names())
    return counts


def _is_dimension(expr: cst.BaseExpression) -> bool:
    """A size a scale is the power of: a name (``head_dim``), a literal, ``x.size(-1)``,
    ``x.shape[-1]``, or arithmetic on them (``dim // heads``)."""
    if isinstance(expr, (cst.Name, cst.Attribute, cst.Integer, cst.Float)):
        return True
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value == "size":
        return True
    if isinstance(expr, cst.BinaryOperation) and not isinstance(expr.operator, cst.MatrixMultiply):
        return _is_dimension(expr.left) and _is_dimension(expr.right)
    return isinstance(expr, cst.Subscript) and isinstance(expr.value, cst.Attribute) and expr.value.attr.value == "shape"


def _grouped(expr: cst.BaseExpression, code) -> str:
    """The code of an operand, in parentheses unless it binds tighter than any operator."""
    text = code(expr)
    simple = (cst.Name, cst.Attribute, cst.Call, cst.Subscript, cst.Integer, cst.Float)
    if isinstance(expr, simple) or isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Power):
        return text
    return f"({text})"


def _negated(condition: cst.BaseExpression, code) -> str:
    """The boolean mask of the positions a ``masked_fill(condition, -inf)`` keeps."""
    if isinstance(condition, cst.Comparison) and len(condition.comparisons) == 1:
        operator = condition.comparisons[0].operator
        flipped = {cst.Equal: "!=", cst.NotEqual: "=="}.get(type(operator))
        if flipped is not None:
            return f"{code(condition.left)} {flipped} {code(condition.comparisons[0].comparator)}"
    if isinstance(condition, cst.UnaryOperation) and isinstance(condition.operator, cst.BitInvert):
        return code(condition.expression)
    return f"~{_grouped(condition, code)}"
