"""Small things every lesson needs: what this machine is, and questions whose answers are computed.

    from minipipe.course.lesson import machine, check_yourself
    print(machine())                     # cores (this process's slice), GPUs, what a run of p ranks will use
    check_yourself("How many idle slots ...?", f"{n} — because ...", number=n)

A question's answer and its explanation are computed in the cell, never typed. The learner
commits to an answer first — a number, several, or a choice (minipipe.course.question) — and
sees the verdict and the explanation once she has; an exported page, with no kernel, shows the
question with the answer folded (an HTML <details>).
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass

from ..engine.cores import allowed_cores, describe_cores
from ..engine.placement import place, visible_gpus


@dataclass(frozen=True)
class Machine:
    cores: int  # the cores this process may use (a workshop participant's slice)
    gpus: list[str]
    torch: str
    python: str
    core_ids: tuple[int, ...] = ()  # which cores those are
    machine_cores: int = 0  # all the machine's cores

    def device_for(self, ranks: int) -> str:
        """What `run` picks for `ranks` processes (placement.place): a GPU each when there are
        enough, the GPUs there are shared when fewer, else the CPU."""
        where = place(ranks, len(self.gpus))
        if where.device == "cpu":
            return "cpu (gloo)"
        if where.backend == "nccl":
            return "cuda (NCCL, one GPU per rank)"
        return f"cuda: {where.label}"

    def __str__(self) -> str:
        gpus = ", ".join(self.gpus) if self.gpus else "none"
        given = (
            f" ({describe_cores(list(self.core_ids))} of the machine's {self.machine_cores})"
            if self.core_ids and self.machine_cores > self.cores
            else ""
        )
        lines = [f"CPU cores: {self.cores}{given}   GPUs: {gpus}   torch {self.torch}   Python {self.python}"]
        for p in (2, 4):
            note = (
                " — more ranks than cores: they take turns, so every measured time stretches"
                if p > self.cores and not self.gpus
                else ""
            )
            lines.append(f"a run with p={p} ranks uses: {self.device_for(p)}{note}")
        return "\n".join(lines)


def machine() -> Machine:
    """This machine, as the engine sees it (cores this process may use, visible GPUs)."""
    import torch

    gpus = [torch.cuda.get_device_name(i) for i in range(visible_gpus())]
    ids = allowed_cores()
    return Machine(
        len(ids),
        gpus,
        torch.__version__.split("+")[0],
        platform.python_version(),
        tuple(ids),
        os.cpu_count() or len(ids),
    )


def check_yourself(question: str, answer: str, **judged) -> None:
    """Show a question, and its (computed) explanation once the learner has answered.

    `judged`: number=, numbers= or choices= with correct= (and tolerance=, unit=), as
    minipipe.course.question.Question takes them. Without any, the answer is only folded away
    until the learner opens it."""
    from IPython.display import HTML, display

    from .question import Question, question_html

    if judged:
        display(Question(question, answer, **judged))
    else:
        display(HTML(question_html(question, answer)))


@dataclass(frozen=True)
class Held:
    """Bytes PyTorch holds for a model's weights, gradients and optimizer state, by kind, and for how
    many parameters (elements) in how many tensors."""

    parameters: int
    gradients: int
    optimizer: int
    elements: int
    tensors: int


def state_after_a_step(precision: str = "fp32", optimizer: str = "adam", width: int = 256) -> Held:
    """Train a Linear(width, width) one step in `precision` ("fp32" or "bf16-mixed") with `optimizer`
    ("adam" or "sgd") and count what PyTorch then holds, by kind (parallel/accounting.py's counts).
    Mixed precision computes in bfloat16 and steps an fp32 master copy of the weights, which counts
    as optimizer state (ZeRO §3.1); the fp32 gradients that step reads are freed after it."""
    import torch

    from ..parallel.accounting import optimizer_bytes, tensors_bytes

    if precision not in ("fp32", "bf16-mixed") or optimizer not in ("adam", "sgd"):
        raise ValueError(f"measured for fp32 or bf16-mixed with adam or sgd; got {precision!r}, {optimizer!r}")
    mixed = precision == "bf16-mixed"
    layer = torch.nn.Linear(width, width)
    master = [p.detach().clone().requires_grad_() for p in layer.parameters()] if mixed else list(layer.parameters())
    layer = layer.to(torch.bfloat16) if mixed else layer
    step = torch.optim.Adam(master) if optimizer == "adam" else torch.optim.SGD(master, lr=0.1)
    weights = list(layer.parameters())
    layer(torch.randn(8, width, dtype=weights[0].dtype)).sum().backward()
    if mixed:
        for copy, w in zip(master, weights):
            copy.grad = w.grad.float()
    step.step()
    if mixed:
        for copy in master:
            copy.grad = None
    return Held(
        tensors_bytes(weights),
        tensors_bytes(w.grad for w in weights),
        optimizer_bytes(step) + (tensors_bytes(master) if mixed else 0),
        sum(w.numel() for w in weights),
        len(weights),
    )
