"""The step time of a layout's pipeline, in closed form (what the simulator would find, without
replaying thousands of micro-batches)."""
from __future__ import annotations


def pipeline_time(kind: str, p: int, m: int, v: int, busiest: float, mean: float, message: float) -> float:
    """Step time of the pipeline (without data parallelism): `busiest` and `mean` are f + b of one
    micro-batch on the busiest and on the mean rank, `message` one message between neighbours.

    With equal ranks this is the kinds' makespan (m + (p−1)/v)·(f + b). With a heavier rank (the
    last, which also runs the head) the busiest one paces the steady state and every rank's work
    fills and drains the pipeline: (m − 1/v)·busiest + (p/v)·mean. Messages (c each) add what the
    simulator finds on the critical path. The fill and drain cross p−1 boundaries each way,
    2c(p−1). 1F1B keeps exactly as many micro-batches in flight as the ranks' work covers: a
    micro-batch's trip through all p ranks and back, p·mean + 2c(p−1), lets p micro-batches
    through, so unless the busiest rank is slower the steady state runs at mean + 2c(p−1)/p per
    micro-batch. Interleaved 1F1B's deeper warm-up hides the messages but in the fill and the
    drain, 2c·(p·v − 1) (while c is small next to a chunk's work). tests/test_plan.py holds this
    to simulate_mesh: equal when every stage has as many blocks; when the blocks do not divide
    evenly it errs by a few per cent."""
    if p == 1:
        return (m - 1 / v) * busiest + p / v * mean
    if kind == "1f1b":
        trip = 2 * message * (p - 1) / p           # a micro-batch's share of one round trip
        fill_drain = p * mean + 2 * message * (p - 1)
        return max((m - 1) * busiest + fill_drain,                          # paced by the busiest rank
                   (m - 1) * (mean + trip) + fill_drain - 2 * message / p)  # paced by the round trips
    return (m - 1 / v) * busiest + p / v * mean + 2 * message * (p * v - 1)
