"""The executor on real processes (gloo): same math as the unsplit model, real memory savings.

Each test starts its processes once and runs many configurations inside them (run_many):
starting a group of workers costs seconds on a small machine.
"""

import pytest

from minipipe.engine.config import RunConfig
from minipipe.engine.launch import run_many
from tests.support.reference import assert_same_math

pytestmark = pytest.mark.distributed

MODELS = {
    "mlp": {"width": 16, "depth": 8},  # 9 layers
    "gpt": {"width": 16, "heads": 2, "depth": 6, "block": 8, "vocab": 16},  # 8 layers
}
STEPS = 3


def configs_for(p):
    for model, args in MODELS.items():
        for kind in ("naive", "gpipe", "1f1b", "interleaved", "zb-h1"):
            for m in (1, 2, 4, 8):
                if kind == "interleaved" and m % p:
                    continue
                yield RunConfig(
                    schedule=kind,
                    p=p,
                    m=m,
                    model=model,
                    model_args=args,
                    batch_size=16,
                    steps=STEPS,
                    optimizer="sgd",
                    lr=0.05,
                    return_grads=True,
                    timeout=60,
                )


@pytest.mark.timeout(600)
@pytest.mark.parametrize("p", [1, 2, 4])
def test_same_loss_gradients_and_weights_as_one_process(p):
    configs = list(configs_for(p))
    results = run_many(configs)
    for result in results:
        assert len(result.losses) == STEPS
        assert_same_math(result, STEPS)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("p", [2, 4])
def test_nccl_message_order_on_gloo_same_math(p):
    """On GPUs (NCCL) both ranks of a pair issue their messages in one agreed order; gloo runs
    match by tag. message_order="issue" runs NCCL's way here, so CPU-only CI covers it too."""
    from minipipe.engine.config import prepare

    configs = [
        RunConfig(
            schedule=k,
            p=p,
            m=4,
            model="mlp",
            model_args=MODELS["mlp"],
            batch_size=16,
            steps=STEPS,
            optimizer="sgd",
            lr=0.05,
            return_grads=True,
            timeout=60,
            message_order="issue",
        )
        for k in ("gpipe", "1f1b", "interleaved", "zb-h1")
    ]
    assert all(prepare(c).in_order for c in configs) and not prepare(configs[0].replace(message_order="auto")).in_order
    for result in run_many(configs):
        assert_same_math(result, STEPS)


@pytest.mark.timeout(300)
def test_written_sends_and_receives_run_as_written_with_the_same_math():
    """A schedule that writes torch's SEND_F, RECV_F, SEND_B, RECV_B (and FSDP's actions, which do
    nothing on minipipe's whole stages) trains as its derived form does, either message order:
    a V placement's neighbours on one rank, DualPipe-V's pairs, zero bubble's split backward."""
    from minipipe import make_schedule
    from minipipe.schedule.lowering import with_fsdp, with_sends_and_receives

    written = [
        with_sends_and_receives(with_fsdp(make_schedule(k, 2, 4, v)))
        for k, v in (("1f1b", 1), ("zb-h1", 1), ("zb-v", 2), ("dualpipe-v", 2))
    ]
    assert all(s.explicit_comms and s.fsdp for s in written)
    configs = [
        RunConfig(
            schedule=s,
            model="mlp",
            model_args=MODELS["mlp"],
            batch_size=16,
            steps=STEPS,
            optimizer="sgd",
            lr=0.05,
            return_grads=True,
            timeout=60,
            message_order=order,
        )
        for s in written
        for order in ("issue", "auto")
    ]
    for result in run_many(configs):
        assert_same_math(result, STEPS)
        sends = [e for e in result.traces[-1].events if e.action.op == "SEND_F"]
        assert sends and all(e.end >= e.start for e in sends)  # measured where they were written


@pytest.mark.timeout(300)
def test_adam_steps_match_too():
    # On the MLP: in the GPT the key bias has a gradient that is zero up to rounding (softmax
    # ignores a shift of the keys), and Adam turns that rounding noise into full-size steps.
    configs = [
        RunConfig(
            schedule=k,
            p=2,
            m=4,
            model="mlp",
            model_args=MODELS["mlp"],
            batch_size=16,
            steps=STEPS,
            optimizer="adam",
            lr=1e-3,
            return_grads=True,
        )
        for k in ("gpipe", "interleaved")
    ]
    for result in run_many(configs):
        assert_same_math(result, STEPS, rtol=1e-5, atol=1e-5)


def held_at_peak(schedule, per_stage: list[int]) -> tuple[list[int], list[int]]:
    """Per rank, the most micro-batches (stage chunks) and bytes held at once, by replaying its
    list: a forward takes its stage's bytes, the backward that ends with it (B, or W) frees them."""
    counts, peaks = [], []
    for acts in schedule.actions:
        n = nbytes = most = peak = 0
        for a in acts:
            step = 1 if a.op == "F" else -1 if a.op in ("B", "W") else 0  # I keeps them for its W
            n, nbytes = n + step, nbytes + step * per_stage[a.stage]
            most, peak = max(most, n), max(peak, nbytes)
        counts.append(most)
        peaks.append(peak)
    return counts, peaks


@pytest.mark.timeout(300)
def test_memory_read_from_the_executor():
    from minipipe.course.exercises.memory import bytes_per_microbatch

    p, m = 4, 8
    kinds = ("gpipe", "1f1b", "naive", "interleaved")
    configs = [
        RunConfig(
            schedule=k,
            p=p,
            m=m,
            v=2 if k == "interleaved" else None,
            model="mlp",
            model_args=MODELS["mlp"],
            batch_size=16,
            steps=1,
        )
        for k in kinds
    ]
    results = dict(zip(kinds, run_many(configs)))
    # a rank's peak counts all its stages at once: an interleaved rank's two chunks hold at the same time
    for config, (kind, result) in zip(configs, results.items()):
        counts, peaks = held_at_peak(result.plan.schedule, bytes_per_microbatch(config))
        assert result.peak_held == counts and result.peak_bytes == peaks, kind
    assert results["interleaved"].peak_held[0] > p  # more than 1F1B's p, in chunks
    assert results["gpipe"].peak_held == [m] * p
    assert results["naive"].peak_held == [1] * p
    held = results["1f1b"].peak_held
    assert all(held[r] <= p - r for r in range(p)), held
    # and it is real memory: the bytes autograd kept for backward on rank 0
    gpipe_bytes, one_f_bytes = results["gpipe"].peak_bytes[0], results["1f1b"].peak_bytes[0]
    assert one_f_bytes > 0
    assert gpipe_bytes / one_f_bytes == pytest.approx(m / p, rel=0.05)


def split_backward(schedule, defer_w: bool, only=lambda mb: True):
    """The same lists with every B (of the micro-batches `only` picks) split into I (input grad)
    then W (weight grad); with `defer_w` every W waits until the rank's last action, as
    zero-bubble schedules allow. Splitting only some keeps B and I+W in one schedule."""
    from minipipe import Schedule
    from minipipe.schedule.ops import I, W

    lists = []
    for acts in schedule.actions:
        split = [a for a in acts if a.op == "B" and only(a.mb)]
        body = [
            x
            for a in acts
            for x in (
                ((I(a.stage, a.mb),) if defer_w else (I(a.stage, a.mb), W(a.stage, a.mb))) if a in split else (a,)
            )
        ]
        lists.append(body + ([W(a.stage, a.mb) for a in split] if defer_w else []))
    return Schedule.build("custom", schedule.p, schedule.m, schedule.v, lists, schedule.placement)


def v_shaped(p: int, m: int):
    """Two stages per rank placed in a V, as ZB-V and DualPipe-V place them: stage s on rank s
    for the first half, mirrored back for the second (rank 0 holds the first and the last
    stage). Each rank runs its first stage's forwards, its second's, then the backwards back."""
    from minipipe import Schedule
    from minipipe.schedule.ops import B, F

    placement = [s if s < p else 2 * p - 1 - s for s in range(2 * p)]
    lists = []
    for r in range(p):
        first, second = r, 2 * p - 1 - r
        lists.append(
            [F(first, mb) for mb in range(m)]
            + [F(second, mb) for mb in range(m)]
            + [B(second, mb) for mb in range(m)]
            + [B(first, mb) for mb in range(m)]
        )
    return Schedule.build("custom", p, m, 2, lists, placement)


@pytest.mark.timeout(300)
def test_hand_written_split_backward_and_placement_schedules_match_too():
    from minipipe import make_schedule

    schedules = [
        split_backward(make_schedule(kind, 2, 4, v), defer)
        for kind, v in (("1f1b", 1), ("interleaved", 2))
        for defer in (False, True)
    ]
    schedules += [
        split_backward(make_schedule("1f1b", 2, 4), False, only=lambda mb: mb % 2),  # B and I+W mixed
        v_shaped(2, 4),
        split_backward(v_shaped(2, 4), True, only=lambda mb: mb < 2),
    ]
    configs = [
        RunConfig(
            schedule=s,
            model=model,
            model_args=MODELS[model],
            batch_size=16,
            steps=STEPS,
            optimizer="sgd",
            lr=0.05,
            return_grads=True,
        )
        for s in schedules
        for model in MODELS
    ]
    results = run_many(configs)
    for result in results:
        assert result.config.p == 2 and result.config.m == 4  # taken from the schedule
        assert_same_math(result, STEPS)
    assert all(r.plan.schedule.splits_backward() for r in results[:10])
    assert results[-4].plan.schedule.placement == (0, 1, 1, 0)
    # deferring W keeps every micro-batch's activations until the end: memory grows to m
    assert results[2].peak_held == [4, 4]
