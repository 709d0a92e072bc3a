"""Every knob the framework tables name that can be looked up exists in the installed framework."""

import pytest

from minipipe.frameworks import knobs
from tests.support.frameworks import need

FRAMEWORK = {"deepspeed": "deepspeed", "megatron": "megatron", "fsdp": "torch", "jax": "jax", "torch": "torch"}


@pytest.mark.parametrize("name", sorted(knobs.TABLES))
def test_the_knobs_exist_here(name):
    need(FRAMEWORK[name])
    if name == "jax":
        from minipipe.frameworks.jax import host_devices

        host_devices(4)
    found = knobs.check(name)
    assert found and all(found.values()), {k: ok for k, ok in found.items() if not ok}
    assert knobs.markdown(name).count("\n") == len(knobs.TABLES[name]) + 1


def test_a_lookup_that_is_not_there_is_found_missing():
    assert not knobs._found("torch.distributed.fsdp:fully_shard(no_such_parameter)")
    assert not knobs._found("no.such.module:thing")
