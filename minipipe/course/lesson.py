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
    cores: int                       # the cores this process may use (a workshop participant's slice)
    gpus: list[str]
    torch: str
    python: str
    core_ids: tuple[int, ...] = ()   # which cores those are
    machine_cores: int = 0           # all the machine's cores

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
        given = f" ({describe_cores(list(self.core_ids))} of the machine's {self.machine_cores})" \
            if self.core_ids and self.machine_cores > self.cores else ""
        lines = [f"CPU cores: {self.cores}{given}   GPUs: {gpus}   torch {self.torch}   Python {self.python}"]
        for p in (2, 4):
            note = " — more ranks than cores: they take turns, so every measured time stretches" \
                if p > self.cores and not self.gpus else ""
            lines.append(f"a run with p={p} ranks uses: {self.device_for(p)}{note}")
        return "\n".join(lines)


def machine() -> Machine:
    """This machine, as the engine sees it (cores this process may use, visible GPUs)."""
    import torch

    gpus = [torch.cuda.get_device_name(i) for i in range(visible_gpus())]
    ids = allowed_cores()
    return Machine(len(ids), gpus, torch.__version__.split("+")[0], platform.python_version(), tuple(ids),
                   os.cpu_count() or len(ids))


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
