"""One process playing a rank of a larger group, for what the lessons show without starting processes.

torch's fake process group (the one torch's own tests use) lets this process be rank r of n:
every collective returns at once and moves nothing, so shapes and groups are real and values are
not. The lessons use it to ask torch itself what it would build on n processes: the groups of
`init_device_mesh` (is minipipe's mesh numbered as torch numbers it?) and what FSDP keeps.

    with playing(rank=1, world=4):
        fully_shard(model)                      # rank 1's shards, as on 4 processes
    torch_mesh((2, 2, 2), ("pp", "dp", "tp"))   # every rank's coordinates and groups, torch's word
"""
from __future__ import annotations

import contextlib

import torch.distributed as dist


@contextlib.contextmanager
def playing(rank: int, world: int):
    """This process is `rank` of `world` inside: the default process group is torch's fake one."""
    if dist.is_initialized():
        raise RuntimeError("a process group is already running in this process; playing a rank needs none "
                           "(call torch.distributed.destroy_process_group() first)")
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)
    try:
        yield
    finally:
        dist.destroy_process_group()


def torch_mesh(shape: tuple[int, ...], names: tuple[str, ...]) -> dict[int, dict]:
    """What torch's `init_device_mesh("cpu", shape, mesh_dim_names=names)` makes of every rank:
    rank -> {"coords": its coordinate per dimension, axis: the ranks of its group along that axis}."""
    from torch.distributed.device_mesh import init_device_mesh

    world = 1
    for size in shape:
        world *= size
    out = {}
    for rank in range(world):
        with playing(rank, world):
            mesh = init_device_mesh("cpu", tuple(shape), mesh_dim_names=tuple(names))
            out[rank] = {"coords": tuple(mesh.get_coordinate()),
                         **{axis: tuple(mesh[axis].mesh.tolist()) for axis in names}}
    return out
