"""A schedule run round after round, each round fed by the one before: generation's schedule.

Greedy generation sends every micro-batch through the pipeline once per round; the last stage
picks the next tokens, and stage 0 needs them to start the micro-batch's next round. That is one
more dependency, and nothing else:

    F(0, mb) needs F(last stage, mb - per_round)     for mb >= per_round (round 1 on)

`Rounds` is a Schedule whose `data_needs` says so. Everything that reads dependencies from it
picks it up unchanged: the validator proves the rounds cannot deadlock, the simulator waits for
the fed-back tokens, and the executor derives the token's message from the last stage's rank
to stage 0's like any other (Schedule.messages), tagged, ordered and timed out by the same code.
Micro-batch `mb` is round `mb // per_round`'s micro-batch `mb % per_round`.
"""

from __future__ import annotations

from dataclasses import dataclass

from .ir import Schedule, check_size
from .ops import Action, F
from .validate import validate


@dataclass(frozen=True)
class Rounds(Schedule):
    per_round: int = 1  # micro-batches in one round; m = per_round · rounds

    @property
    def rounds(self) -> int:
        return self.m // self.per_round

    def data_needs(self, a: Action) -> tuple[Action, ...]:
        if a.op == "F" and a.stage == 0 and a.mb is not None and a.mb >= self.per_round:
            return (F(self.n_stages - 1, a.mb - self.per_round),)
        return super().data_needs(a)


def repeat(one_round: Schedule, rounds: int) -> Rounds:
    """`one_round`'s lists `rounds` times, each round's micro-batches numbered after the last's,
    fed back as above; validated."""
    if not one_round.forward_only:
        raise ValueError(
            f"rounds feed the last stage's output back to stage 0 and run forward only; {one_round.kind} has a backward"
        )
    if one_round.op_types - {"F"}:
        raise ValueError(
            f"rounds derive their messages (the token fed back to stage 0 is no neighbour's send); "
            f"give the round's forwards alone, without {', '.join(sorted(one_round.op_types - {'F'}))}"
        )
    k = one_round.m
    check_size(one_round.p, k * rounds, one_round.v)  # before the rounds' lists are built
    lists = tuple(
        tuple(
            a._replace(mb=r * k + a.mb) for r in range(rounds) for a in acts if a.mb is not None
        )  # forwards: all have one
        for acts in one_round.actions
    )
    return validate(
        Rounds(one_round.kind, one_round.p, k * rounds, one_round.v, lists, one_round.placement, per_round=k)
    )
