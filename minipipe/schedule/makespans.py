"""The built-in kinds' step-time formulas, which kinds.py registers with their kinds (as it registers
the generators of generators.py and vshape.py) and theory.makespan reads from the registry.

Each is (p, m, v, f, b, w) -> the time of one step with uniform costs and free communication; f
forward, b the whole backward, w its weight-gradient part (None: half of b), a rank's share of the
model per micro-batch, so that each of v chunks per rank costs 1/v of it. A formula that holds only
for some (p, m) or costs raises ValueError saying where it holds: theory then says so, rather than
give a number the simulator would not.
"""

from __future__ import annotations

import math


def fill_drain(p: int, m: int, v: int, f: float, b: float, w: float | None) -> float:
    """GPipe's, 1F1B's and interleaved 1F1B's: m micro-batches of work, then p − 1 chunks of fill and drain."""
    return (m + (p - 1) / v) * (f + b)  # v = 1 but for interleaved: chunks cost 1/v each


def zb_h1(p: int, m: int, v: int, f: float, b: float, w: float | None) -> float:
    """ZB-H1's: the W's fill the cool-down, so f + b − 2w of each fill-and-drain slot stays idle."""
    w = b / 2 if w is None else w
    if m < p or w > f or w > b - w:
        raise ValueError(
            f"the zb-h1 formula holds for m >= p and w <= min(f, b - w); got p={p}, m={m}, f={f}, b={b}, w={w}"
        )
    return m * (f + b) + (p - 1) * (f + b - 2 * w)


# -- the V placement (vshape.py: two chunks per rank) and breadth-first ---------------------------
def _chunk_costs(f: float, b: float, w: float | None) -> tuple[float, float, float]:
    """A V-placed chunk's forward, input gradient and weight gradient: half a rank's share."""
    w = b / 2 if w is None else w
    return f / 2, (b - w) / 2, w / 2


def zb_v(p: int, m: int, v: int, f: float, b: float, w: float | None) -> float:
    """ZB-V's: its chunks are half as long as a rank's share, and so is its idle."""
    F, I, W = _chunk_costs(f, b, w)  # noqa: E741  (the ZB paper's names for a chunk's F, I and W)
    tuned = math.isclose(W, F) and F <= I <= 2 * F  # the paper's F = I = W, and a little around it
    if m < 2 * p - 1 or not (max(F, W) <= I - W or tuned):
        raise ValueError(
            f"the zb-v formula holds for m >= 2p - 1 and either b - 2w >= max(f, w) or w = f <= b - w "
            f"<= 2f; got p={p}, m={m}, f={f}, b={b}, w={w}: simulate it instead"
        )
    return m * (f + b) + (p - 1) * max(F + I - W, 2 * (I - W))


def dualpipe_v(p: int, m: int, v: int, f: float, b: float, w: float | None, overlap: float = 0.0) -> float:
    """DualPipe-V's: each pair of a forward and a backward hides `overlap` of the shorter under the longer."""
    F, I, W = _chunk_costs(f, b, w)  # noqa: E741  (the ZB paper's names for a chunk's F, I and W)
    B = I + W
    if m < 2 * p or not math.isclose(I, F) or W > F:
        raise ValueError(
            f"the dualpipe-v formula holds for m >= 2p and b - w = f >= w (a chunk's input gradient "
            f"costs its forward); got p={p}, m={m}, f={f}, b={b}, w={w}: simulate it instead"
        )
    hidden = overlap * min(F, B)  # what overlapping saves on each pair
    pairs_on_last_rank = 2 * m - 2 * p - 1
    return m * (f + b) - pairs_on_last_rank * hidden + (p - 1) * (F + B - hidden + B - 3 * W)


def bfs(p: int, m: int, v: int, f: float, b: float, w: float | None) -> float:
    """Breadth-first's: interleaving's fill and drain, once m >= p."""
    if m < p:
        raise ValueError(
            f"the bfs formula holds for m >= p (the first chunk's forwards cover the trip down the "
            f"ranks); got p={p}, m={m}: simulate it instead"
        )
    return fill_drain(p, m, v, f, b, w)
