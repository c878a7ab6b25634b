"""
## What it does

Finds a softmax or a log-softmax (or a sigmoid, which does the same harm) applied to the
predictions that reach a cross-entropy loss (`F.cross_entropy`, `nn.CrossEntropyLoss`): written
in the loss's arguments (`F.cross_entropy(F.softmax(z, 1), y)`), kept under a name on the way
(`probs = z.softmax(-1)` ... `criterion(probs, y)`), or applied by the model itself (a
`nn.Sequential` whose last layer is `nn.Softmax()`, a `forward` that returns `F.softmax(...)`, a
head of a tuple the caller unpacks).

## Why is it wrong

`CrossEntropyLoss` applies `log_softmax` to its input itself: it expects raw, unnormalized
logits. Given probabilities, it treats them as logits and normalizes a second time. The loss can
then never approach zero (for 10 classes it stays above about 1.46 even for a perfect
prediction), and its gradient with respect to the logits is multiplied by the softmax's
Jacobian, whose entries are at most 0.25 and vanish as predictions grow confident: training
slows down and stalls, without an error (the PyTorch docs: "The input is expected to contain the
unnormalized logits for each class"). A sigmoid before the loss squeezes the logits into (0, 1)
in the same way: the loss's own softmax then sees nearly equal scores. A log-softmax before the loss is not wrong, only wasted:
`log_softmax` of a log-softmax gives the same values, so the loss and its gradients are
unchanged while the normalization runs twice.

## Example

```python
for images, labels in loader:
    probs = F.softmax(model(images), dim=1)
    loss = F.cross_entropy(probs, labels)
    loss.backward()
```

## Use instead

```python
for images, labels in loader:
    logits = model(images)
    loss = F.cross_entropy(logits, labels)
    loss.backward()
```
and apply the softmax where probabilities are wanted (predictions, metrics), not before the loss.

## Fix safety

The fix drops the softmax: it puts the softmax's input in its place, in the loss's arguments or
in the one assignment the value came through. It is offered only when nothing else uses the
softmax's output (a name used once, in the loss). Dropping a log-softmax is safe: the loss and
its gradients are the same values (up to rounding). Dropping a softmax is unsafe: it repairs the
loss, so the values change by design (training converges differently, and a learning rate tuned
for the broken loss may need tuning again); so is dropping a sigmoid. So is dropping a log written on a softmax
(`torch.log(F.softmax(z, 1))`): it underflows to `-inf` where a log-softmax stays finite, so the
values can change. A softmax in the model itself (a last
`nn.Softmax()` layer, a `forward` that returns one) is reported without a fix: the model's
output is used elsewhere too (predictions, exported models), and removing the layer changes
them all; return logits from `forward` and apply the softmax at inference.

## References

- https://pytorch.org/docs/stable/generated/torch.nn.CrossEntropyLoss.html
- https://pytorch.org/docs/stable/generated/torch.nn.functional.cross_entropy.html
- https://pytorch.org/docs/stable/generated/torch.nn.LogSoftmax.html
"""

from __future__ import annotations

from torchlint.analysis.losses import Activation, ast_may_be_given
from torchlint.lazy import libcst as cst
from torchlint.rule import Rule, Severity, SyntaxIndex
from torchlint.rules._losses import drop_activation, given_value


class SoftmaxBeforeCrossEntropy(Rule):
    code = "TL407"
    name = "softmax-before-cross-entropy"
    kind = "correctness"
    summary = "A softmax applied before a cross-entropy loss, which applies log-softmax itself"
    severity = Severity.ERROR
    fix_applicability = "safe"

    @classmethod
    def applies(cls, text: str) -> bool:
        return ("cross_entropy" in text or "CrossEntropyLoss" in text) and ("oftmax" in text or "igmoid" in text
                                                                            or "expit" in text)

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        return ast_may_be_given(index, ["cross_entropy"], ["softmax", "log_softmax", "sigmoid"])

    def __init__(self, ctx):
        super().__init__(ctx)
        self.losses = ctx.losses

    def visit_Call(self, node: cst.Call) -> None:
        given = self.losses.given(node, self.ctx.ancestors)
        if given is None:
            return
        loss, predictions, found = given
        if loss != "cross_entropy" or found.kind not in ("softmax", "log_softmax", "sigmoid"):
            return
        self.report(predictions, self._message(found), self._fix(found),
                    severity=Severity.ERROR if found.kind == "softmax" else Severity.WARNING)

    def _message(self, found: Activation) -> str:
        given = f"{given_value(self.ctx, found)} is given to the cross-entropy, which applies log-softmax itself"
        if found.kind == "log_softmax":
            return f"{given}: the values are the same, computed twice; pass the logits"
        if found.kind == "sigmoid":
            return (f"{given} and expects logits: the sigmoid squeezes them into (0, 1), so the loss's softmax sees "
                    "nearly equal scores, cannot approach zero and shrinks the gradients; pass the logits")
        return (f"{given} and takes the probabilities for logits: a double softmax that shrinks the gradients and "
                "stalls training; pass the logits")

    def _fix(self, found: Activation):
        applicability = "safe" if found.kind == "log_softmax" and not found.two_steps else "unsafe"
        edit = drop_activation(self.ctx, found)
        if edit is None:
            return None
        activation = "sigmoid" if found.kind == "sigmoid" else "softmax"
        return self.fix(f"Drop the {activation} before the loss", edit, applicability=applicability)
