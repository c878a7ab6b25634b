"""
## What it does

Finds binary cross-entropy losses given the wrong kind of value, following the value back to
where it was made: a sigmoid before `BCEWithLogitsLoss` / `F.binary_cross_entropy_with_logits`
(written in the loss's arguments, kept under a name, or applied by the model as its last layer),
and `BCELoss` / `F.binary_cross_entropy` given the raw output of a linear or convolution layer
(a model whose last layer is `nn.Linear`, a `forward` that returns `self.fc(x)`).

## Why is it wrong

`BCEWithLogitsLoss` applies the sigmoid itself, inside a log-sum-exp that stays finite for any
logit. Given a sigmoid's output, it squashes values that already lie in (0, 1) a second time, into
(0.5, 0.73): the loss can no longer approach zero for a positive target (it stays above 0.31) and
its gradient shrinks, so training stalls without an error. `BCELoss` is the other way round: it
expects probabilities and takes their logarithm; given raw logits (negative or above one), it
raises "all elements of input should be between 0 and 1" on the CPU and fails a device-side
assertion on CUDA, usually at the first batch. The PyTorch docs recommend `BCEWithLogitsLoss` on
logits: it "is more numerically stable than using a plain Sigmoid followed by a BCELoss".

## Example

```python
for x, target in loader:
    loss = F.binary_cross_entropy_with_logits(torch.sigmoid(model(x)), target)
    loss.backward()
```

## Use instead

```python
for x, target in loader:
    loss = F.binary_cross_entropy_with_logits(model(x), target)
    loss.backward()
```
Keep the sigmoid where probabilities are wanted (`probs = torch.sigmoid(logits)` for metrics),
and give the loss the logits.

## Fix safety

For a sigmoid before `BCEWithLogitsLoss`, the fix drops the sigmoid (its input takes its place,
in the loss's arguments or in the one assignment the value came through), only when nothing else
uses the sigmoid's output. It is unsafe: it repairs the loss, so the values change by design. A
sigmoid that is the model's own last layer, and `BCELoss` on logits, are reported without a fix:
the model's output has other uses, and the choice between dropping the layer and switching the
loss (with what it means for checkpoints and callers) is the author's.

## References

- https://pytorch.org/docs/stable/generated/torch.nn.BCEWithLogitsLoss.html
- https://pytorch.org/docs/stable/generated/torch.nn.BCELoss.html
- https://pytorch.org/docs/stable/generated/torch.nn.functional.binary_cross_entropy_with_logits.html
"""

from __future__ import annotations

from torchlint.analysis.losses import ast_may_be_given
from torchlint.lazy import libcst as cst
from torchlint.rule import Rule, Severity, SyntaxIndex
from torchlint.rules._losses import drop_activation, given_value


class BceLogitsMismatch(Rule):
    code = "TL408"
    name = "bce-logits-mismatch"
    kind = "correctness"
    summary = "A sigmoid before `BCEWithLogitsLoss`, or raw logits given to `BCELoss`"
    severity = Severity.ERROR
    fix_applicability = "unsafe"

    @classmethod
    def applies(cls, text: str) -> bool:
        return "BCE" in text or "binary_cross_entropy" in text

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        # a double sigmoid needs a sigmoid, a BCELoss given logits needs a layer that makes them
        return ast_may_be_given(index, ["bce_with_logits"], ["sigmoid"]) or ast_may_be_given(index, ["bce"], ["logits"])

    def __init__(self, ctx):
        super().__init__(ctx)
        self.losses = ctx.losses

    def visit_Call(self, node: cst.Call) -> None:
        given = self.losses.given(node, self.ctx.ancestors)
        if given is None:
            return
        loss, predictions, found = given
        if loss == "bce_with_logits" and found.kind == "sigmoid":
            edit = drop_activation(self.ctx, found)
            fix = self.fix("Drop the sigmoid before the loss", edit) if edit is not None else None
            self.report(predictions, f"{given_value(self.ctx, found)} is given to `BCEWithLogitsLoss`, which applies "
                                     "the sigmoid itself: a double sigmoid that keeps the loss from approaching zero "
                                     "and shrinks the gradients; pass the logits", fix)
        elif loss == "bce" and found.kind == "logits":
            self.report(predictions, f"{given_value(self.ctx, found)} is given to `BCELoss`, which expects "
                                     "probabilities in [0, 1] and raises on the first negative logit; use "
                                     "`BCEWithLogitsLoss` on the logits")
