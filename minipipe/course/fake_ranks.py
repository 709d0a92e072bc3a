"""One process playing a rank of a larger group, for what the lessons show without starting processes.

torch's fake process group (the one torch's own tests use) lets this process be rank r of n:
every collective returns at once and moves nothing, so shapes and groups are real and values are
not. The lessons use it to ask torch itself what it would build on n processes: the groups of
`init_device_mesh` (is minipipe's mesh numbered as torch numbers it?), what FSDP keeps, and what
its collectives are handed (`Collectives`).

    with playing(rank=1, world=4):
        fully_shard(model)                      # rank 1's shards, as on 4 processes
        with Collectives() as seen:
            loss.backward()                     # seen.count(), seen.bytes("allgather_base")
    torch_mesh((2, 2, 2), ("pp", "dp", "tp"))   # every rank's coordinates and groups, torch's word
"""

from __future__ import annotations

import contextlib

import torch.distributed as dist


@contextlib.contextmanager
def playing(rank: int, world: int):
    """This process is `rank` of `world` inside: the default process group is torch's fake one."""
    if dist.is_initialized():
        raise RuntimeError(
            "a process group is already running in this process; playing a rank needs none "
            "(call torch.distributed.destroy_process_group() first)"
        )
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
            out[rank] = {
                "coords": tuple(mesh.get_coordinate()),
                **{axis: tuple(mesh[axis].mesh.tolist()) for axis in names},
            }
    return out


class Collectives:
    """What every collective was handed while inside (a torch dispatch mode): `calls`, one
    (name, bytes of the whole buffer) per call, the name torch's ('allgather_base',
    'reduce_scatter_base', 'allreduce'), the whole buffer the gathered result, the scattered
    input or the reduced tensor. Under a fake group nothing moves, but the sizes are the real ones.

        with playing(1, 4), Collectives() as seen:
            loss.backward()
        seen.calls          # [('allgather_base', 12288), ...]
    """

    WHOLE = {"allgather_base": 0, "reduce_scatter_base": 1, "allreduce": 0}  # which argument is the whole buffer

    def __init__(self):
        from torch.utils._python_dispatch import TorchDispatchMode

        calls = self.calls = []
        whole = self.WHOLE

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                namespace, _, rest = str(func).partition(".")
                if namespace == "c10d":
                    name = rest.split(".")[0].strip("_")
                    if name not in whole:
                        raise NotImplementedError(f"Collectives() does not know where {name}'s buffer is")
                    buffer = args[whole[name]]
                    buffer = buffer[0] if isinstance(buffer, (list, tuple)) else buffer
                    calls.append((name, buffer.numel() * buffer.element_size()))
                return func(*args, **(kwargs or {}))

        self._mode = Mode()

    def __enter__(self) -> Collectives:
        self._mode.__enter__()
        return self

    def __exit__(self, *exc):
        return self._mode.__exit__(*exc)

    def count(self) -> dict[str, int]:
        """Calls per collective."""
        out: dict[str, int] = {}
        for name, _ in self.calls:
            out[name] = out.get(name, 0) + 1
        return out

    def bytes(self, name: str) -> int:
        """The bytes of every buffer handed to one collective, summed."""
        return sum(n for kind, n in self.calls if kind == name)
