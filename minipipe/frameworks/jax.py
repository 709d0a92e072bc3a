"""A GPipe pipeline in JAX, on the course GPT, beside minipipe's.

    host_devices(2)                       # before JAX starts: 2 CPU devices on this machine
    run = train(RunConfig(schedule="gpipe", p=2, m=4, model="gpt", steps=4))
    run.losses, run.compile_s, run.step_ms

JAX has no pipeline engine to configure; you write the pipeline as one program that every device
runs (SPMD), and JAX compiles it:

- a `Mesh` of devices with named axes; here one axis, "stage", of p devices (a mesh axis is a
  course's mesh dimension: pp here; dp and tp would be more axes);
- `jax.shard_map(f, mesh, in_specs, out_specs)`: f runs once per device on its shard; a
  `PartitionSpec("stage")` gives each device its slice of the stacked stage weights, `P()` gives
  every device the whole array (the data, the embedding and the readout);
- `jax.lax.ppermute(x, "stage", [(0, 1), (1, 2), ...])`: a collective permute, every device sends to
  the next at once — the send/receive of an activation between stages;
- the loop of m + p − 1 ticks: at tick t stage s runs micro-batch t − s (GPipe's fill, then drain).
  Every device computes at every tick: in the fill and the drain a stage computes on zeros and the
  result is thrown away, so in SPMD the bubble costs compute as well as time;
- `jax.grad` differentiates the whole loop; the transpose of a ppermute is the ppermute back, so
  the backward runs the ticks in reverse: all forwards, then all backwards, the last micro-batch's
  first — GPipe, with the backwards in reverse order. `order()` writes that order by hand, as a
  minipipe Schedule, from how autodiff reverses the loop: it is not read from what XLA compiled or
  timed as it ran (XLA may reorder independent work), unlike the orders of the other frameworks here.

`jit` with shardings (what `pjit` was) is the other way: give arrays `NamedSharding`s and let XLA's
partitioner insert the collectives itself; it partitions data and tensors well, but it does not
pipeline a loop by itself, which is why pipelines in JAX are written with shard_map as here.

Each stage holds the same number of blocks (the blocks are stacked, one slice per device); stage 0
also holds the embedding and the last the readout, computed on every device and used only there:
minipipe's uniform cut of the GPT, when p divides its depth. Weights, data and Adam are
minipipe's (torch's initial weights, copied); float32 on both sides.
"""

from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import dataclass

from ..schedule.ir import Schedule
from ..schedule.ops import B, F


def host_devices(n: int) -> None:
    """Ask XLA for n CPU devices. Works only before JAX starts its backend; raises if it has."""
    flag = f"--xla_force_host_platform_device_count={n}"
    flags = os.environ.get("XLA_FLAGS", "").split()
    asked = [int(f.split("=")[1]) for f in flags if f.startswith("--xla_force_host_platform_device_count=")]
    if asked and max(asked) >= n:  # an earlier call asked for enough: keep it
        return
    if "jax" in sys.modules:
        import jax

        if len(jax.devices("cpu")) >= n:
            return
        raise ValueError(
            f"JAX has started with {len(jax.devices('cpu'))} CPU device(s); set "
            f"XLA_FLAGS={flag} before the first `import jax` (restart the kernel)"
        )
    others = [f for f in flags if "host_platform_device_count" not in f]
    os.environ["XLA_FLAGS"] = " ".join([*others, flag])


def order(p: int, m: int) -> Schedule:
    """The order the program below runs, written by hand from how autodiff reverses its loop (not
    read from the compiled program): each stage's forwards by micro-batch, then its backwards from
    the last micro-batch to the first."""
    actions = [[F(s, mb) for mb in range(m)] + [B(s, mb) for mb in reversed(range(m))] for s in range(p)]
    return Schedule.build("jax-gpipe", p, m, 1, actions)


# -- the course GPT in JAX, reading torch's weights --------------------------------------------
def params_of(layers, p: int) -> dict:
    """minipipe's GPT layers (Embedding, Blocks..., Readout) as JAX arrays: the blocks stacked with
    a leading axis of p stages, each holding depth/p blocks."""
    import jax
    import jax.numpy as jnp

    def arrays(module):
        return {name: jnp.asarray(t.detach().cpu().numpy()) for name, t in module.named_parameters()}

    embed, *blocks, readout = layers
    depth = len(blocks)
    if depth % p:
        raise ValueError(
            f"the JAX pipeline stacks equal stages: the GPT's depth ({depth} blocks) must be a multiple of "
            f"p={p}; use depth={p * max(1, round(depth / p))}"
        )
    per = [arrays(b) for b in blocks]
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs).reshape(p, depth // p, *xs[0].shape), *per)
    return {"embed": arrays(embed), "blocks": stacked, "readout": arrays(readout), "heads": blocks[0].heads}


def _layer_norm(x, weight, bias):
    import jax.numpy as jnp

    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)  # biased, as torch's LayerNorm
    return (x - mean) / jnp.sqrt(var + 1e-5) * weight + bias


def _linear(x, w, b):
    return x @ w.T + b  # torch keeps (out, in)


def _block(x, w, heads: int):
    import jax
    import jax.numpy as jnp

    b, t, c = x.shape
    q, k, v = jnp.split(
        _linear(_layer_norm(x, w["ln1.weight"], w["ln1.bias"]), w["qkv.weight"], w["qkv.bias"]), 3, axis=-1
    )
    q, k, v = (z.reshape(b, t, heads, c // heads).transpose(0, 2, 1, 3) for z in (q, k, v))
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(c // heads)
    scores = jnp.where(jnp.tril(jnp.ones((t, t), bool)), scores, -jnp.inf)  # causal
    y = (jax.nn.softmax(scores, axis=-1) @ v).transpose(0, 2, 1, 3).reshape(b, t, c)
    x = x + _linear(y, w["proj.weight"], w["proj.bias"])
    h = jax.nn.gelu(
        _linear(_layer_norm(x, w["ln2.weight"], w["ln2.bias"]), w["fc.weight"], w["fc.bias"]), approximate=False
    )  # torch's default GELU is the exact one
    return x + _linear(h, w["out.weight"], w["out.bias"])


def _loss(logits, target):
    import jax
    import jax.numpy as jnp

    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.take_along_axis(logp, target[..., None], axis=-1).mean()


def gpipe_loss(mesh, p: int, m: int, heads: int):
    """The GPipe step as a function loss(blocks, embed, readout, x, y) -> mean loss: shard_map over
    the mesh's "stage" axis, m + p − 1 ticks, ppermute between stages."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec as P

    def per_device(blocks, embed, readout, x, y):
        s = jax.lax.axis_index("stage")
        mine = jax.tree.map(lambda a: a[0], blocks)  # this stage's blocks: [depth/p, ...]
        xs, ys = x.reshape(m, -1, x.shape[1]), y.reshape(m, -1, y.shape[1])
        width = embed["tok.weight"].shape[1]

        def tick(carry, t):
            state, total = carry
            first = embed["tok.weight"][xs[jnp.minimum(t, m - 1)]] + embed["pos.weight"][: xs.shape[2]]
            h = jnp.where(s == 0, first, state)  # stage 0 takes micro-batch t
            h = jax.lax.fori_loop(
                0,
                jax.tree.leaves(mine)[0].shape[0],
                lambda i, h: _block(h, jax.tree.map(lambda a: a[i], mine), heads),
                h,
            )
            done = t - (p - 1)  # the last stage finishes micro-batch `done`
            logits = _linear(
                _layer_norm(h, readout["norm.weight"], readout["norm.bias"]),
                readout["linear.weight"],
                readout["linear.bias"],
            )
            loss = _loss(logits, ys[jnp.clip(done, 0, m - 1)])
            total = total + jnp.where((s == p - 1) & (done >= 0), loss, 0.0)
            state = jax.lax.ppermute(h, "stage", [(i, i + 1) for i in range(p - 1)])  # send to the next stage
            return (state, total), None

        start = (jnp.zeros((xs.shape[1], xs.shape[2], width), jnp.float32), jnp.zeros((), jnp.float32))
        start = jax.lax.pcast(start, ("stage",), to="varying")  # each stage carries its own values
        (_, total), _ = jax.lax.scan(tick, start, jnp.arange(m + p - 1))
        return jax.lax.psum(total, "stage") / m

    return jax.shard_map(per_device, mesh=mesh, in_specs=(P("stage"), P(), P(), P(), P()), out_specs=P())


@dataclass
class JaxRun:
    config: object
    losses: list[float]  # one per step: the mean loss over the batch
    compile_s: float  # tracing and compiling the step (the first call)
    step_ms: list[float]  # each later step, compiled, until its result is ready
    devices: int
    version: str


def train(config) -> JaxRun:
    """Train a RunConfig (model "gpt", schedule gpipe, p stages, m micro-batches) as a JAX GPipe on
    p host devices, from minipipe's initial weights, batches and Adam (optax)."""
    if config.model != "gpt" or config.dp * config.cp * config.tp != 1 or config.schedule != "gpipe":
        raise ValueError("the JAX pipeline here trains the course GPT with schedule='gpipe' (dp=1, cp=1, tp=1)")
    if config.optimizer != "adam" or config.batch_size % config.m:
        raise ValueError("use optimizer='adam' and a batch_size divisible by m")
    host_devices(config.p)
    import jax
    import optax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from ..models.catalog import task_of

    if len(jax.devices()) < config.p:
        raise ValueError(
            f"JAX sees {len(jax.devices())} device(s), the pipeline needs p={config.p}; call "
            f"host_devices({config.p}) before importing jax"
        )
    task = task_of(config)
    params = params_of(task.layers(), config.p)
    heads = params.pop("heads")
    mesh = jax.make_mesh((config.p,), ("stage",), devices=jax.devices()[: config.p])
    params["blocks"] = jax.device_put(params["blocks"], NamedSharding(mesh, P("stage")))
    params["embed"], params["readout"] = jax.device_put((params["embed"], params["readout"]), NamedSharding(mesh, P()))
    loss_fn = gpipe_loss(mesh, config.p, config.m, heads)
    optimizer = optax.adam(config.lr)  # torch's Adam: betas (0.9, 0.999), eps 1e-8
    replicated = NamedSharding(mesh, P())
    on_mesh = set(mesh.devices.flat)
    state = jax.tree.map(
        lambda a: a if a.sharding.device_set == on_mesh else jax.device_put(a, replicated), optimizer.init(params)
    )  # its step count too, on the mesh's devices

    @jax.jit
    def step(params, state, x, y):
        loss, grads = jax.value_and_grad(lambda q: loss_fn(q["blocks"], q["embed"], q["readout"], x, y))(params)
        updates, state = optimizer.update(grads, state, params)
        return optax.apply_updates(params, updates), state, loss

    losses, times, compile_s = [], [], 0.0
    placed = jax.tree.map(lambda a: a.sharding, (params, state))
    for n in range(config.steps):
        x, y = (jax.device_put(t.numpy(), replicated) for t in task.batch(n))
        start = time.perf_counter()
        params, state, loss = step(params, state, x, y)
        loss = float(loss.block_until_ready())
        params, state = jax.device_put((params, state), placed)  # as placed: the compiled step fits again
        elapsed = time.perf_counter() - start
        if n == 0:
            compile_s = elapsed
        else:
            times.append(1000 * elapsed)
        losses.append(loss)
    return JaxRun(config, losses, compile_s, times, config.p, jax.__version__)
