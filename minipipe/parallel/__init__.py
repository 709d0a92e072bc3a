"""The other two parallelisms, written in the open beside the pipeline:

- data.py: data parallelism (replicas, each a share of the batch; gradients averaged by
  bucketed all-reduces that overlap the backward),
- tensor.py: tensor parallelism (Megatron's column- and row-parallel layers; attention split by
  heads; the f/g pair of conjugate collectives).

Where each rank sits in pipeline × data × tensor parallelism is minipipe/parallel/mesh.py.
"""
