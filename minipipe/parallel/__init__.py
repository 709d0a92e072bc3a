"""The other parallelisms, written in the open beside the pipeline, and what they stand on:

- mesh.py: where each process sits in pipeline × data × context × expert × tensor parallelism, and
  its groups,
- data.py: data parallelism (replicas, each a share of the batch; gradients averaged by
  bucketed all-reduces that overlap the backward),
- tensor.py: tensor parallelism (Megatron's column- and row-parallel layers, the f/g pair of
  conjugate collectives; the tensor-parallel form a model declares for its layer types),
- expert.py: expert parallelism (a mixture-of-experts layer's experts split over the ep ranks,
  tokens dispatched and combined by all-to-all; the layers a model declares hold experts),
- context.py: context parallelism (each sequence split zig-zag over the cp ranks; the
  context-parallel form a model declares for its layer types), ring_attention.py its attention
  (K and V blocks round the ring, merged by the online softmax; the backward likewise),
- accounting.py: the bytes by kind and the memory by kind, from a plan's shapes,
- errors.py: CommError, what a failed wait on a peer becomes (the pipeline's messages use it too).

Nothing here knows a model or the engine: the engine sits above and hands them in.
"""
