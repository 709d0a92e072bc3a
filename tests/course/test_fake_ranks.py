"""One process playing a rank of a larger group (torch's fake process group: no processes, no
network): the group is gone afterwards, and the collectives' buffers are heard as they are.
That minipipe's mesh numbers ranks as torch's DeviceMesh does is tests/parallel/test_mesh.py's."""

import pytest
import torch.distributed as dist

from minipipe.course.fake_ranks import playing, torch_mesh
from minipipe.parallel.mesh import WORLD_AXES, Mesh


def test_torch_mesh_reports_every_rank_as_torch_sees_it():
    """Rank by rank, the coordinate and the groups torch's DeviceMesh gives (the lessons compare
    minipipe's mesh with these)."""
    mesh = Mesh(pp=2, dp=2, tp=2)
    torch_says = torch_mesh(mesh.shape, WORLD_AXES)
    assert sorted(torch_says) == list(mesh.ranks())
    assert torch_says[5]["coords"] == (1, 0, 0, 1) and torch_says[5]["tp"] == (4, 5) and torch_says[5]["pp"] == (1, 5)


def test_playing_a_rank_leaves_no_group_behind_and_refuses_a_second():
    with playing(1, 4):
        assert dist.get_rank() == 1 and dist.get_world_size() == 4
        with pytest.raises(RuntimeError, match="already running"), playing(0, 4):
            pass
    assert not dist.is_initialized()


def test_collectives_hear_fsdps_real_buffers():
    """fully_shard on 2 played ranks: each layer gathered for the forward and again for the
    backward, its gradients reduce-scattered once, every buffer the whole layer's bytes."""
    import torch
    from torch.distributed.fsdp import fully_shard

    from minipipe.course.fake_ranks import Collectives

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    whole = [sum(q.numel() * 4 for q in layer.parameters()) for layer in model if list(layer.parameters())]
    with playing(0, 2):
        for layer in model:
            if list(layer.parameters()):
                fully_shard(layer)
        fully_shard(model)
        with Collectives() as seen:
            model(torch.randn(3, 8)).sum().backward()
        with Collectives() as reduced:
            dist.all_reduce(torch.ones(5))
    assert seen.count() == {"allgather_base": 2 * len(whole), "reduce_scatter_base": len(whole)}
    assert seen.bytes("allgather_base") == 2 * sum(whole) and seen.bytes("reduce_scatter_base") == sum(whole)
    assert reduced.calls == [("allreduce", 20)]
