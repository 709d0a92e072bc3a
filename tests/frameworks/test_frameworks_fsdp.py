"""FSDP2 on gloo: minipipe's executor's losses bit for bit, 1/n of every kind of state, the buffers
handed to its collectives as the parameters' padded shapes say (the bytes sent: the ring formula on
them); and FSDP inside pipeline stages through torch's runtime."""

import pytest
import torch

from minipipe.engine.stage import SavedBytes
from minipipe.frameworks.fsdp import formula_bytes, fsdp_run, ring_share, unit_bytes
from minipipe.models import task_of
from tests.support.frameworks import RUNS, executor, need

need("torch")


def activation_bytes(config, rows):
    """What autograd keeps for backward when the unsplit model runs `rows` rows of batch 0."""
    task = task_of(config)
    model = torch.nn.Sequential(*task.layers())
    saved = SavedBytes({q.untyped_storage().data_ptr() for q in model.parameters()})
    x, y = task.batch(0)
    with torch.autograd.graph.saved_tensors_hooks(saved.pack, saved.unpack):
        task.loss(model(x[:rows]), y[:rows])
    return saved.total


def test_unit_bytes_pad_the_first_dimension():
    assert unit_bytes(torch.nn.Linear(3, 5), 2) == (6 * 3 + 6) * 4  # 5 rows padded to 6
    assert ring_share(1000, 4) == 750


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_fsdp_holds_a_share_of_everything_and_gathers_the_padded_units():
    config, ours = RUNS["fsdp"], executor("fsdp")  # minipipe's data parallelism, dp=2
    whole = sum(q.numel() * 4 for q in torch.nn.Sequential(*task_of(config).layers()).parameters())
    units = task_of(config).layers()
    padded = sum(unit_bytes(u, 2) for u in units)
    for reshard, gathers in ((True, 2), (False, 1)):
        run = fsdp_run(config, reshard_after_forward=reshard)
        assert run.losses == ours.losses  # bit for bit
        for step in run.collectives:
            assert step["count"] == {"all-gather": gathers * len(units), "reduce-scatter": len(units)}
            assert step["buffers"] == {"all-gather": gathers * padded, "reduce-scatter": padded}  # measured
            assert {k: step[k] for k in step["buffers"]} == {k: ring_share(b, 2) for k, b in step["buffers"].items()}
        assert run.formula == pytest.approx(formula_bytes(units, 2, reshard))
        assert run.formula == {k: ring_share(b, 2) for k, b in run.collectives[-1]["buffers"].items()}
    for memory in run.memory:
        assert memory.parameters == memory.gradients == whole // 2  # the GPT's shapes split evenly
        assert whole <= memory.optimizer < whole + 1024  # Adam's two moments, halved, + step counts
        assert memory.activations == activation_bytes(config, 8)  # its share of the batch, as unsplit
    assert run.gathered == [max(unit_bytes(u, 2) for u in units)] * 2
    with pytest.raises(ValueError, match="p=1"):
        fsdp_run(config.replace(p=2))


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_pipeline_with_fsdp_in_each_stage_gives_the_executors_losses():
    from minipipe import make_schedule
    from minipipe.frameworks.torch_runtime import runtime_runs, to_csv
    from minipipe.schedule.lowering import with_fsdp, with_sends_and_receives

    config, ours = RUNS["1f1b dp2"], executor("1f1b dp2")
    written = with_sends_and_receives(with_fsdp(make_schedule("1f1b", 2, config.m)))  # its unshards and reshards too
    run, as_written = runtime_runs([config, config.replace(schedule=written)])
    assert run.losses == ours.losses  # bit for bit
    # torch's runtime runs the PP×FSDP schedule minipipe wrote ("compute_comms": as written, nothing added),
    # with the losses and the collectives of the one it lowers itself
    assert as_written.lowered == {r: row.split(",") for r, row in enumerate(to_csv(written).splitlines())}
    assert as_written.losses == run.losses and as_written.collectives == run.collectives
    layers = task_of(config).layers()
    for rank in range(config.p * config.dp):
        stage = layers[slice(*run.plan.partition.bounds[run.plan.mesh.coords(rank).pp :][:2])]
        expected = formula_bytes(stage, config.dp, reshard_after_forward=False)  # once a step, not per micro-batch
        first, *later = run.collectives[rank]
        assert first["count"]["all-gather"] > len(stage)  # torch infers the shapes in the first step
        for step in later:
            assert step["count"] == {"all-gather": len(stage), "reduce-scatter": len(stage)}
            assert step["buffers"]["all-gather"] == sum(unit_bytes(u, config.dp) for u in stage)
            assert {k: step[k] for k in expected} == pytest.approx(expected)
