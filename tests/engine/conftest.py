"""The checkpoint tests' fixtures (a one-rank gloo group; a checkpoint saved after 2 steps), shared by this folder."""

from tests.support.checkpoints import one_rank_group, saved  # noqa: F401 (fixtures, found by name)
