"""FSDP2 on gloo: the unsplit model's losses, 1/n of every kind of state, collective bytes equal
to the formula; and FSDP inside pipeline stages through torch's runtime."""
import pytest
import torch
from frameworks import GPT, need
from reference import reference_run

from minipipe import RunConfig
from minipipe.engine.stage import SavedBytes
from minipipe.frameworks.fsdp import formula_bytes, fsdp_run, ring_share, unit_bytes
from minipipe.models import task_of

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
    assert unit_bytes(torch.nn.Linear(3, 5), 2) == (6 * 3 + 6) * 4       # 5 rows padded to 6
    assert ring_share(1000, 4) == 750


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_fsdp_holds_a_share_of_everything_and_moves_the_formulas_bytes():
    config = RunConfig(p=1, dp=2, m=1, model="gpt", model_args=GPT, batch_size=16, steps=3)
    losses, _, _ = reference_run(config, config.steps)
    whole = sum(q.numel() * 4 for q in torch.nn.Sequential(*task_of(config).layers()).parameters())
    units = task_of(config).layers()
    for reshard, gathers in ((True, 2), (False, 1)):
        run = fsdp_run(config, reshard_after_forward=reshard)
        assert run.losses == pytest.approx(losses, rel=1e-5)
        for step in run.collectives:
            assert step["count"] == {"all-gather": gathers * len(units), "reduce-scatter": len(units)}
            assert {k: step[k] for k in ("all-gather", "reduce-scatter")} == pytest.approx(run.formula)
        assert run.formula == pytest.approx(formula_bytes(units, 2, reshard))
    for memory in run.memory:
        assert memory.parameters == memory.gradients == whole // 2         # the GPT's shapes split evenly
        assert whole <= memory.optimizer < whole + 1024                    # Adam's two moments, halved, + step counts
        assert memory.activations == activation_bytes(config, 8)           # its share of the batch, as unsplit
    assert run.gathered == [max(unit_bytes(u, 2) for u in units)] * 2
    with pytest.raises(ValueError, match="p=1"):
        fsdp_run(config.replace(p=2))


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_pipeline_with_fsdp_in_each_stage_gives_the_unsplit_losses():
    from minipipe.frameworks.torch_runtime import runtime_runs

    from minipipe import make_schedule
    from minipipe.frameworks.torch_runtime import to_csv
    from minipipe.schedule.lowering import with_fsdp, with_sends_and_receives

    config = RunConfig(schedule="1f1b", p=2, dp=2, m=4, model="gpt", model_args=GPT, batch_size=32, steps=3)
    written = with_sends_and_receives(with_fsdp(make_schedule("1f1b", 2, 4)))     # its unshards and reshards too
    run, ours = runtime_runs([config, config.replace(schedule=written)])
    losses, _, _ = reference_run(config, config.steps)
    assert run.losses == pytest.approx(losses, rel=1e-5)
    # torch's runtime runs the PP×FSDP schedule minipipe wrote ("compute_comms": as written, nothing added),
    # with the losses and the collectives of the one it lowers itself
    assert ours.lowered == {r: row.split(",") for r, row in enumerate(to_csv(written).splitlines())}
    assert ours.losses == run.losses and ours.collectives == run.collectives
    layers = task_of(config).layers()
    for rank in range(config.p * config.dp):
        stage = layers[slice(*run.plan.partition.bounds[run.plan.mesh.coords(rank).pp:][:2])]
        expected = formula_bytes(stage, config.dp, reshard_after_forward=False)   # once a step, not per micro-batch
        first, *later = run.collectives[rank]
        assert first["count"]["all-gather"] > len(stage)       # torch infers the shapes in the first step
        for step in later:
            assert step["count"] == {"all-gather": len(stage), "reduce-scatter": len(stage)}
            assert {k: step[k] for k in expected} == pytest.approx(expected)
