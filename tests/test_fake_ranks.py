"""minipipe's mesh numbers ranks as torch's init_device_mesh does, asked rank by rank on one
process (torch's fake process group: no processes, no network)."""
import pytest
import torch.distributed as dist

from minipipe.course.fake_ranks import playing, torch_mesh
from minipipe.parallel.mesh import AXES, Mesh


@pytest.mark.parametrize("shape", [(2, 2, 2), (2, 1, 2), (1, 4, 1), (4, 1, 1), (1, 2, 3)])
def test_every_rank_has_torchs_coordinates_and_groups(shape):
    mesh = Mesh(*shape)
    torch_says = torch_mesh(mesh.shape, AXES)
    assert sorted(torch_says) == list(mesh.ranks())
    for rank in mesh.ranks():
        assert tuple(mesh.coords(rank)) == torch_says[rank]["coords"]
        for axis in AXES:
            assert mesh.group(rank, axis) == torch_says[rank][axis], (rank, axis)


def test_playing_a_rank_leaves_no_group_behind_and_refuses_a_second():
    with playing(1, 4):
        assert dist.get_rank() == 1 and dist.get_world_size() == 4
        with pytest.raises(RuntimeError, match="already running"):
            with playing(0, 4):
                pass
    assert not dist.is_initialized()
