"""One rank's job in a training run: the plan's flushed steps (train.py), or, where the schedule
updates the weights inside it, the whole run without a flush (no_flush.py, which builds on
train.py). What the launcher (launch.py) and torchrun (torchrun.py) run on each rank.

    result = train_rank(plan, rank, report)      # this rank's RankResult
"""

from __future__ import annotations

from .config import Plan
from .no_flush import train_no_flush
from .train import RankResult, train_steps


def train_rank(plan: Plan, rank: int, report, status=None) -> RankResult:
    """Run the plan on this global rank; returns its share of the results."""
    if plan.schedule.updates is not None:  # no flush: the weights update inside the schedule
        return train_no_flush(plan, rank, report, status)
    return train_steps(plan, rank, report, status)
