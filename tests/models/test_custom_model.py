"""Your own model in the pipeline: a model the course does not ship, given as a class, as a function
defined where it is used, as "package.module:function", and from a notebook kernel's __main__; the same
math as the whole model in plain torch; and what cannot work refused before any process starts."""

import inspect
import json
import multiprocessing.process
import pickle
import threading
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from minipipe import RunConfig, run, run_many
from minipipe.engine.config import prepare
from minipipe.models import make_task, task_of
from minipipe.models.custom import Sendable, describe_model
from tests.support.processes import workers_alive
from tests.support.reference import assert_same_math

ROOT = Path(__file__).resolve().parents[2]
STEPS = 2


class NormGELUBlock(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.linear = nn.Linear(width, width)

    def forward(self, x):
        return x + F.gelu(self.linear(self.norm(x)))


class NormGELUMLP(nn.Module):
    """LayerNorm/GELU blocks between an input and an output projection: depth + 2 layers."""

    def __init__(self, batch_size, seed, width=16, depth=5, inputs=6, outputs=3):
        super().__init__()
        self.batch_size, self.inputs, self.outputs = batch_size, inputs, outputs
        self.body = nn.Sequential(
            nn.Linear(inputs, width), *[NormGELUBlock(width) for _ in range(depth)], nn.Linear(width, outputs)
        )

    def layers(self):
        return list(self.body)

    def loss(self, output, target):
        return F.mse_loss(output, target)

    def batch(self, step):
        x = torch.randn(self.batch_size, self.inputs)  # plain randn: the pipeline seeds it by (seed, step)
        return x, torch.sin(2 * x[:, : self.outputs])


def base(model, **changes):
    return RunConfig(
        **{
            **dict(
                model=model,
                p=2,
                m=4,
                batch_size=16,
                steps=STEPS,
                optimizer="sgd",
                lr=0.05,
                return_grads=True,
                timeout=60,
            ),
            **changes,
        }
    )


# -- one process: what the pipeline asks of a model -----------------------------------------
def test_weights_and_data_follow_from_the_seed_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    a, b = make_task(NormGELUMLP, seed=3, depth=3), make_task(NormGELUMLP, seed=3, depth=3)
    assert torch.equal(torch.rand(3), expected), "building the model moved the caller's random generator"
    la, lb = a.layers(), b.layers()
    assert len(la) == 5 and la[0] is not a.layers()[0]  # new modules each call, like the course models
    assert all(torch.equal(p, q) for x, y in zip(la, lb) for p, q in zip(x.parameters(), y.parameters()))
    assert all(torch.equal(u, w) for u, w in zip(a.batch(4), b.batch(4)))
    assert not torch.equal(a.batch(4)[0], a.batch(5)[0])
    other = make_task(NormGELUMLP, seed=4, depth=3)
    assert not torch.equal(other.layers()[0].weight, la[0].weight)
    assert not torch.equal(other.batch(4)[0], a.batch(4)[0])


def test_a_model_by_name_and_by_value():
    task = make_task("tests.support.own_model:make", batch_size=8, depth=2)
    assert task.n_layers == 4 and task.batch(0)[1].dtype == torch.long
    plan = prepare(base(NormGELUMLP, model_args={"depth": 3}))
    assert isinstance(plan.config.model, Sendable)
    back = pickle.loads(pickle.dumps(plan))  # what a worker receives
    assert back.config.model.factory is NormGELUMLP  # importable: rebuilt by reference
    assert task_of(back.config).describe().startswith(f"{__name__}.NormGELUMLP: 5 layers")

    def local_factory(batch_size, seed):  # not importable: travels by value
        return NormGELUMLP(batch_size, seed, depth=1)

    plan = prepare(base(local_factory))
    rebuilt = pickle.loads(pickle.dumps(plan)).config.model.factory
    assert rebuilt is not local_factory and task_of(plan.config).n_layers == 3
    meta = json.loads(json.dumps(plan.meta))
    assert meta["model"] == f"{__name__}.test_a_model_by_name_and_by_value.<locals>.local_factory"
    assert describe_model(NormGELUMLP, {"act": nn.GELU, "width": 4}) == {
        "model": f"{__name__}.NormGELUMLP",
        "model_args": {"act": repr(nn.GELU), "width": 4},
    }


# -- refusals: a ValueError before any process starts ---------------------------------------
class OnlyLayers:
    def __init__(self, batch_size, seed):
        pass

    def layers(self):
        return [nn.Linear(2, 2)]


def with_layers(layers):
    def make(batch_size, seed):
        model = NormGELUMLP(batch_size, seed, depth=1)
        model.layers = lambda: layers
        return model

    return make


def with_batch(value):
    def make(batch_size, seed):
        model = NormGELUMLP(batch_size, seed, depth=1)
        model.batch = lambda step: value
        return model

    return make


def closing_over(thing):
    def make(batch_size, seed):
        print(thing)
        return NormGELUMLP(batch_size, seed)

    return make


REFUSALS = {
    "open file": (
        lambda tmp: closing_over(open(tmp / "data.txt", "w")),  # noqa: SIM115  (left open: what is refused)
        "cannot be sent to the worker processes",
    ),
    "lock": (lambda tmp: closing_over(threading.Lock()), "cannot be sent to the worker processes.*lock"),
    "generator": (lambda tmp: closing_over(x for x in range(3)), "cannot be sent.*inside the function"),
    "missing methods": (
        lambda tmp: OnlyLayers,
        "returned an object of class OnlyLayers, which has no loss\\(\\) or batch\\(\\)",
    ),
    "no layers": (lambda tmp: with_layers([]), "layers\\(\\) returned no layers"),
    "a function as a layer": (
        lambda tmp: with_layers([nn.Linear(6, 3), torch.relu]),
        "layers\\(\\)\\[1\\] is a builtin_function_or_method, not an nn.Module",
    ),
    "one module": (lambda tmp: with_layers(nn.LSTM(6, 3)), "returned one LSTM; return a list"),
    "batch not a pair": (
        lambda tmp: with_batch(torch.zeros(16, 6)),
        "batch\\(0\\) returned a Tensor; it must return two tensors, \\(inputs, targets\\)",
    ),
    "batch of another size": (
        lambda tmp: with_batch((torch.zeros(8, 6), torch.zeros(8, 3))),
        "inputs of shape \\(8, 6\\); the first dimension must be batch_size=16",
    ),
    "no batch_size parameter": (lambda tmp: lambda width: None, "does not fit .*Give it batch_size and seed"),
    "a built model": (lambda tmp: NormGELUMLP(16, 0), "not a built one .*pass NormGELUMLP itself"),
    "no such module": (lambda tmp: "tests.no_such_module:make", "cannot import 'tests.no_such_module'"),
    "no such function": (lambda tmp: "tests.support.own_model:build", "module tests.support.own_model has no 'build'"),
    "a name without a colon": (lambda tmp: "resnet", "unknown model 'resnet'; choose one of mlp, gpt, moe, or give"),
}


@pytest.mark.parametrize("case", REFUSALS)
def test_refused_before_any_process_starts(case, tmp_path, monkeypatch):
    make, message = REFUSALS[case]
    model = make(tmp_path)
    monkeypatch.setattr(
        multiprocessing.process.BaseProcess,
        "start",
        lambda self: pytest.fail(f"a process was started for a bad model ({case})"),
    )
    before = workers_alive()
    with pytest.raises(ValueError, match=message):
        run(base(model))
    assert workers_alive() == before


# -- real processes: the same math as the whole model in plain torch ------------------------
@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_same_math_as_the_whole_model():
    def shallow(batch_size, seed):  # defined here: reaches the workers by value
        return NormGELUMLP(batch_size, seed, depth=3, width=8)

    configs = [
        base(NormGELUMLP, schedule="1f1b"),  # 7 layers cut 4 + 3
        base(NormGELUMLP, schedule="interleaved", m=4),  # 4 stages of 7 layers on 2 ranks
        base("tests.support.own_model:make", schedule="zb-h1", model_args={"depth": 2}),
        base(shallow, schedule="gpipe", optimizer="adam", lr=1e-3),
    ]
    results = run_many(configs)
    for result in results:
        assert_same_math(result, STEPS)
    model = results[0].model()  # the trained model, whole, on this process
    x, _ = task_of(configs[0]).batch(0)
    assert [type(layer) for layer in model] == [type(layer) for layer in NormGELUMLP(1, 0).layers()]
    expected = torch.nn.Sequential(*task_of(configs[0]).layers())
    expected.load_state_dict(results[0].state)
    torch.testing.assert_close(model(x), expected(x))


NOTEBOOK = [
    "import sys\nsys.path.insert(0, {root!r})\n"
    "import torch\nfrom torch import nn\nfrom torch.nn import functional as F\n"
    "from minipipe import RunConfig, run_many\nfrom tests.support.reference import assert_same_math",
    "{block}\n\n{model}",
    "configs = [RunConfig(schedule=s, p=2, m=4, model=NormGELUMLP, model_args={{'depth': 5}}, batch_size=16, "
    "steps=2, optimizer='sgd', lr=0.05, return_grads=True, timeout=60) for s in ('1f1b', 'interleaved')]\n"
    "for result in run_many(configs):\n"
    "    assert_same_math(result, 2)\n"
    "    print('same math', result.config.schedule, type(result.model()[3]).__module__)",
]


@pytest.mark.distributed
@pytest.mark.timeout(240)
def test_classes_defined_in_a_notebook_reach_the_workers(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    from nbclient import NotebookClient

    source = {"root": str(ROOT), "block": inspect.getsource(NormGELUBlock), "model": inspect.getsource(NormGELUMLP)}
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c.format(**source)) for c in NOTEBOOK])
    NotebookClient(nb, timeout=180, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    text = "".join(o.get("text", "") for o in nb.cells[-1].outputs if o.output_type == "stream")
    assert "same math 1f1b __main__\nsame math interleaved __main__" in text, text
