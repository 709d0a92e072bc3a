"""Small things every lesson needs: what this machine is, and questions whose answers are computed.

    from minipipe.course.lesson import machine, check_yourself
    print(machine())                     # cores, GPUs, what a run of p ranks will use
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


@dataclass(frozen=True)
class Machine:
    cores: int
    gpus: list[str]
    torch: str
    python: str

    def device_for(self, ranks: int) -> str:
        """What `run` picks for `ranks` processes: a GPU each when there are enough, else the CPU."""
        return "cuda (NCCL, one GPU per rank)" if len(self.gpus) >= ranks else "cpu (gloo)"

    def __str__(self) -> str:
        gpus = ", ".join(self.gpus) if self.gpus else "none"
        lines = [f"CPU cores: {self.cores}   GPUs: {gpus}   torch {self.torch}   Python {self.python}"]
        for p in (2, 4):
            note = " — more ranks than cores: they take turns, so every measured time stretches" \
                if p > self.cores and not len(self.gpus) >= p else ""
            lines.append(f"a run with p={p} ranks uses: {self.device_for(p)}{note}")
        return "\n".join(lines)


def machine() -> Machine:
    """This machine, as the engine sees it (cores this process may use, visible GPUs)."""
    import torch

    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] \
        if torch.cuda.is_available() else []
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return Machine(cores, gpus, torch.__version__.split("+")[0], platform.python_version())


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
