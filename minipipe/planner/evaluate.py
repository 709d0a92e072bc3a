"""One layout predicted: its memory by kind, its step time by part, its throughput (a Row).

    memory      footprint.py: model state by ZeRO stage, activations by schedule and recomputation
    block       block_time.py: a block's compute, and what its tp, cp and ZeRO collectives expose
    pp          a message per micro-batch and stage boundary (the activation split over tp, as
                Megatron sends it); timing.py says what it adds to the step
    pipeline    timing.py's closed form for the schedule kind (simulated where it is only close:
                search.plan(refine=...))
    step end    step_end.py: the gradient reduction over dp·cp and the optimizer step
    ep          a mixture-of-experts model (Setup.experts): each MoE block's dispatch and combine
                all-to-alls per micro-batch, two forward and two backward (experts.all_to_all:
                traffic.moe_exchanges' buffers on sim/network.ring, the engine's formula), on the
                ep group's link, added to every block's forward and backward (exposed: no overlap
                with compute is priced, the dense blocks of a model with some priced as MoE ones)
    MFU         model FLOPs (shapes.model_flops, no recomputation) / (GPUs × peak × step)

`Predictor` works out what many layouts share once (the search asks it thousands of times);
`evaluate(setup, layout)` is one prediction.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache

from ..parallel.mesh import check_expert_split
from ..schedule import kinds
from ..sim.network import Link
from .block_time import BlockTime, block_time, embedding_tp_collectives
from .compute import BlockCosts, HeadCosts, block_costs, head_costs
from .experts import all_to_all
from .footprint import Footprint, ModelState
from .prediction import Row
from .setup_and_layout import Layout, Setup, links
from .shapes import hidden_bytes, model_flops, recompute_flops
from .step_end import Reductions, reductions, step_end
from .timing import EXACT, pipeline_time, simulated, stage_times


def check_layout(setup: Setup, layout: Layout) -> None:
    """A ValueError saying what to change when `layout` cannot run `setup`."""
    model, lay = setup.model, layout
    problems = []
    if lay.gpus != setup.gpus:
        problems.append(f"tp·cp·pp·dp = {lay.gpus}, not the {setup.gpus} GPUs")
    if lay.pp * lay.v > model.layers:
        problems.append(f"pp·v = {lay.pp * lay.v} stages for {model.layers} layers (at most one stage a layer)")
    if lay.dp * lay.micro_batch * lay.m != setup.batch:
        problems.append(
            f"dp·micro_batch·m = {lay.dp * lay.micro_batch * lay.m}, not the batch of {setup.batch} sequences"
        )
    if model.heads % lay.tp or model.kv % lay.tp or model.inner % lay.tp:
        problems.append(
            f"tp={lay.tp} must divide the heads ({model.heads}), key/value heads ({model.kv}) and MLP "
            f"width ({model.inner})"
        )
    moe = setup.experts
    if moe is None and lay.ep > 1:
        problems.append(f"ep={lay.ep} splits experts, and {model.name} has none (use ep=1, or a MoE model)")
    if moe is not None:
        check_expert_split(moe.experts, lay.ep, model.name)
        if moe.ffn % lay.tp:
            problems.append(f"tp={lay.tp} must divide the experts' width ({moe.ffn})")
    if model.seq % (2 * lay.cp) and lay.cp > 1:
        problems.append(f"cp={lay.cp} must divide the sequence ({model.seq}) into 2·cp equal chunks")
    if problems:
        raise ValueError(f"{lay.describe()} does not fit the setup: " + "; ".join(problems))


class NoFormula(ValueError):
    """The schedule kind's closed form does not hold for this layout (it would have to be replayed)."""


@dataclass(frozen=True)
class Pipeline:
    """What the layouts of one schedule, tp, cp, pp, dp, v and ZeRO stage share (Predictor.pipeline)."""

    first: int  # the rank holding the embedding
    last: int  # the rank holding the head
    ranks: tuple[int, ...]  # the ranks that tell the pace and the memory (Footprint.structure)
    blocks: dict[int, int]  # rank -> its blocks, for those ranks
    counts: list[int]  # blocks per stage
    peak: Callable[[int, int, int, int], int]  # the kind's peak_inflight(p, m, v, rank)
    exact: bool  # its closed form is the simulator's
    state: dict[int, ModelState]  # rank -> Footprint.state (parameters, gradients, optimizer bytes), for the
    # ranks that hold most: the first and the last
    deepest: dict[int, int]  # rank -> blocks of its largest stage, the same ranks
    reductions: Reductions  # the step-end reductions and optimizer step


@dataclass(slots=True)
class MemoryNeed:
    """The pipeline rank whose GPU holds most under a layout, and its bytes by kind."""

    rank: int
    by_kind: dict[str, float]

    @property
    def total(self) -> float:
        return sum(self.by_kind.values())


class Predictor:
    """evaluate() for one setup, with what many layouts share worked out once: block costs by
    (tp, cp, dp, micro-batch, recomputation, ZeRO stage), links by cut, the pipeline's shape and
    state by (schedule, tp, cp, pp, dp, v, ZeRO stage)."""

    def __init__(self, setup: Setup):
        self.setup = setup
        s = setup
        self.footprint = Footprint(
            s.model,
            s.precision,
            s.optimizer,
            sequence_parallel=s.sequence_parallel,
            vocab_parallel=s.vocab_parallel,
            fp32_gradients=s.fp32_gradients,
            experts=s.experts,
        )
        self._costs: dict[tuple[int, int, int, int, str, int, int], BlockTime] = {}
        self._links: dict[tuple[int, int, int, int], dict[str, Link]] = {}
        self._heads: dict[tuple[int, int, int], HeadCosts] = {}
        self._pipelines: dict[tuple[str, int, int, int, int, int, int, int], Pipeline] = {}
        self._redo: dict[str, float] = {}
        self._messages: dict[tuple[int, int, int, int], float] = {}
        self._compute: dict[tuple[int, int, int], BlockCosts] = {}
        self.useful = model_flops(s.model, s.batch)

    def links(self, tp: int, cp: int, dp: int, ep: int = 1) -> dict[str, Link]:
        key = (tp, cp, dp, ep)
        if key not in self._links:
            self._links[key] = links(self.setup, Layout(tp, 1, dp, 1, 1, cp=cp, ep=ep))
        return self._links[key]

    def experts_time(self, layout: Layout) -> tuple[float, float]:
        """(forward, backward) seconds of one MoE block's all-to-alls for one micro-batch."""
        s, moe = self.setup, self.setup.experts
        if moe is None or layout.ep == 1:
            return 0.0, 0.0
        link = self.links(layout.tp, layout.cp, layout.dp, layout.ep)["ep"]
        f, b = (
            all_to_all(
                s.model, moe, layout.micro_batch, ep=layout.ep, link=link, precision=s.precision, cp=layout.cp, phase=ph
            )["time"]
            for ph in ("forward", "backward")
        )
        return f, b

    def block(self, layout: Layout) -> BlockTime:
        """One block's time per micro-batch on one GPU (block_time.py)."""
        tp, cp, dp, b = layout.tp, layout.cp, layout.dp, layout.micro_batch
        key = (tp, cp, dp, b, layout.recompute, layout.zero, layout.ep)
        found = self._costs.get(key)
        if found is None:
            s = self.setup
            compute = self._compute.get((tp, cp, b))
            if compute is None:  # the compute alone: the same for every dp, recomputation and ZeRO stage
                compute = self._compute[(tp, cp, b)] = block_costs(
                    s.model,
                    s.precision,
                    s.gpu.peak,
                    s.achieved,
                    tp=tp,
                    cp=cp,
                    micro_batch=b,
                    sequence_parallel=s.sequence_parallel,
                )
            found = block_time(s, self.footprint, self.links(tp, cp, dp), compute, layout)
            a2a_f, a2a_b = self.experts_time(layout)
            if a2a_f or a2a_b:
                found = replace(found, forward=found.forward + a2a_f, backward=found.backward + a2a_b, ep=a2a_f + a2a_b)
            self._costs[key] = found
        return found

    def message(self, tp: int, cp: int, dp: int, b: int) -> float:
        """One activation (its 1/tp slice, as Megatron sends it) between pipeline neighbours."""
        key = (tp, cp, dp, b)
        if key not in self._messages:
            s = self.setup
            self._messages[key] = self.links(tp, cp, dp)["pp"].send(hidden_bytes(s.model, b, s.value_bytes, tp, cp))
        return self._messages[key]

    def head(self, tp: int, cp: int, b: int) -> HeadCosts:
        key = (tp, cp, b)
        if key not in self._heads:
            s = self.setup
            self._heads[key] = head_costs(
                s.model, s.precision, s.gpu.peak, s.achieved, tp=tp if s.vocab_parallel else 1, cp=cp, micro_batch=b
            )
        return self._heads[key]

    def pipeline(self, layout: Layout) -> Pipeline:
        """What every layout with this schedule, tp, cp, pp, dp, v and ZeRO stage shares, whatever
        its micro-batch and recomputation (worked out once: the search asks for it thousands of times)."""
        key = (layout.schedule, layout.tp, layout.cp, layout.pp, layout.dp, layout.v, layout.zero, layout.ep)
        shared = self._pipelines.get(key)
        if shared is None:
            fp, (kind, tp, p, v, z) = self.footprint, (layout.schedule, layout.tp, layout.pp, layout.v, layout.zero)
            structure = fp.structure(kind, p, v)
            first, last = structure.first, structure.last
            shards = layout.zero_shards
            held: tuple[int, ...] = (first, last) if first != last else (first,)
            if self.setup.experts is not None:  # up to the first rank past the dense blocks: most experts
                held = tuple(sorted(set(structure.ranks) | set(range(fp.first_moe_rank(kind, p, v) + 1))))
            k = kinds.get(kind)
            peak = k.peak_inflight
            assert peak is not None  # only kinds with formulas are planned (timing.plannable)
            shared = self._pipelines[key] = Pipeline(
                first=first,
                last=last,
                ranks=structure.ranks,
                blocks=structure.blocks,
                counts=fp.counts(p, v),
                peak=peak,
                exact=k.name in EXACT or p == 1,
                state={
                    r: fp.state(
                        kind,
                        tp=tp,
                        p=p,
                        v=v,
                        shards=shards,
                        zero=z,
                        r=r,
                        ep=layout.ep,
                        expert_shards=layout.expert_shards,
                    )
                    for r in held
                },
                deepest={r: max(fp.stages_of(kind, p, v, r)) for r in held},
                reductions=reductions(self.setup, fp, self.links(tp, layout.cp, layout.dp), layout, structure.ranks),
            )
        return shared

    def memory(self, layout: Layout) -> MemoryNeed:
        """The pipeline rank that needs most, and its bytes by kind: the first rank holds the most
        micro-batches and the embedding, the last the head (footprint.Footprint)."""
        fp, pipeline = self.footprint, self.pipeline(layout)
        p, m, v = layout.pp, layout.m, layout.v
        acts = fp.activations(layout.tp, layout.cp, layout.micro_batch, layout.recompute)
        need: dict[int, dict[str, float]] = {}
        for r, (params, grads, state) in pipeline.state.items():
            act = fp.held(
                acts,
                chunks=pipeline.peak(p, m, v, r),
                v=v,
                deepest=pipeline.deepest[r],
                first=r == pipeline.first,
                last=r == pipeline.last,
            )
            need[r] = {"parameters": params, "gradients": grads, "optimizer": state, "activations": act}
        fullest = max(need, key=lambda r: sum(need[r].values()))  # of equals, the first rank held
        return MemoryNeed(fullest, need[fullest])

    def predict(
        self, layout: Layout, *, simulate: bool = False, fallback: bool = True, memory: MemoryNeed | None = None
    ) -> Row:
        """The Row of a checked layout (evaluate checks it first); `memory`: what memory() said of
        it, when the caller asked first."""
        s, model = self.setup, self.setup.model
        tp, cp, p, dp, v, b, m = layout.tp, layout.cp, layout.pp, layout.dp, layout.v, layout.micro_batch, layout.m
        blk = self.block(layout)
        pipeline = self.pipeline(layout)
        head = self.head(tp, cp, b)
        blk_f, blk_b, head_f, head_b = blk.forward, blk.backward, head.forward, head.backward
        emb_f = embedding_tp_collectives(s.vocab_parallel) * blk.tp_collective
        first, last, blocks = pipeline.first, pipeline.last, pipeline.blocks
        fwd, bwd = {}, {}
        busiest, most = 0, -1.0
        for r in pipeline.ranks:
            f = blocks[r] * blk_f + (emb_f if r == first else 0.0) + (head_f if r == last else 0.0)
            g = blocks[r] * blk_b + (head_b if r == last else 0.0)
            fwd[r], bwd[r] = f, g
            if f + g > most:
                busiest, most = r, f + g
        mean = (model.layers * (blk_f + blk_b) + emb_f + head_f + head_b) / p
        message = self.message(tp, cp, dp, b) if p > 1 else 0.0
        f_busy, b_busy, w_busy = fwd[busiest], bwd[busiest], blocks[busiest] * blk.weight
        f_max, b_max = max(fwd.values()), max(bwd.values())
        pipe = closed = None
        try:
            closed = pipeline_time(
                layout.schedule,
                p,
                m,
                v,
                busiest=most,
                mean=mean,
                message=message,
                forward=f_busy,
                backward=b_busy,
                weight=w_busy,
                forward_max=f_max,
                backward_max=b_max,
            )
            pp_comm = (
                closed
                - pipeline_time(
                    layout.schedule,
                    p,
                    m,
                    v,
                    busiest=most,
                    mean=mean,
                    message=0.0,
                    forward=f_busy,
                    backward=b_busy,
                    weight=w_busy,
                    forward_max=f_max,
                    backward_max=b_max,
                )
                if p > 1
                else 0.0
            )
        except ValueError as e:  # the kind's formula does not hold here: replay it, or say so
            if not fallback:
                raise NoFormula(str(e)) from None
            simulate = True
        pipe = closed
        if simulate:
            stages = stage_times(
                pipeline.counts,
                forward=blk_f,
                backward=blk_b,
                weight=blk.weight,
                embedding=emb_f,
                head_forward=head_f,
                head_backward=head_b,
            )
            pipe = simulated(layout.schedule, p, m, v, stages, message)
            if closed is None:  # what the messages add: the replay's own difference
                pp_comm = pipe - simulated(layout.schedule, p, m, v, stages, 0.0)
        need = self.memory(layout) if memory is None else memory
        # the step's end: the gradient reduction over dp·cp, the optimizer step, a tied head's gradient sum
        end = step_end(pipeline.reductions, layout, overlap=s.dp_overlap, forward=fwd, backward=bwd, message=message)
        assert pipe is not None  # the closed form's, or the replay's where it has none
        step = pipe + end.exposed + end.optimizer
        redo_flops = self._redo.get(layout.recompute)
        if redo_flops is None:
            redo_flops = self._redo[layout.recompute] = (
                recompute_flops(model, s.batch * model.seq, layout.recompute) * model.layers
            )
        whole = s.gpus * s.gpu.peak * step
        n_busy = blocks[busiest]
        comm = {
            "tp": m * (n_busy * blk.tp + (emb_f if busiest == first else 0.0)),
            "cp": m * n_busy * blk.cp,
            **({"ep": m * n_busy * blk.ep} if s.experts is not None else {}),
            "zero": m * n_busy * blk.zero,
            "pp": pp_comm,
            "dp": end.reduction,
            "dp exposed": end.exposed,
        }
        compute = m * (n_busy * blk.compute + (head_f + head_b if busiest == last else 0.0))
        # 1F1B's closed form is the simulator's while the last rank paces it (to within a few messages);
        # an earlier rank busier than the last (extra blocks, a light head) it over-counts: replay it then
        exact = pipeline.exact and (
            fwd[busiest] + bwd[busiest] == fwd[last] + bwd[last] or kinds.get(layout.schedule).name != "1f1b"
        )
        timed = "simulated" if simulate else "closed form" if exact else "closed form (close)"
        # the layout, then its figures by name (at most 15 arguments: more, and Python passes them in a dict)
        return Row(
            layout,
            step=step,
            pipeline=pipe,
            compute=compute,
            bubble=1 - m * most / pipe,
            comm=comm,
            memory=need.by_kind,
            memory_rank=need.rank,
            tflops=self.useful / s.gpus / step / 1e12,
            mfu=self.useful / whole,
            hfu=(self.useful + redo_flops) / whole,
            capacity=s.gpu.memory,
            usable=s.usable,
            optimizer=end.optimizer,
            timed=timed,
        )


@lru_cache(maxsize=64)
def predictor(setup: Setup) -> Predictor:
    return Predictor(setup)


def evaluate(setup: Setup, layout: Layout, *, simulate: bool = False) -> Row:
    """Predict one layout (the module docstring says where each figure comes from); `simulate`:
    time the pipeline by replaying it (timing.simulated) instead of its closed form."""
    check_layout(setup, layout)
    return predictor(setup).predict(layout, simulate=simulate)
