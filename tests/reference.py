"""The independent reference: the unsplit model, on one process, full batch at once."""
import torch

from minipipe.models import task_of


def reference_run(config, steps: int):
    """Losses per step, the first step's gradients, and the final state of the unsplit model
    trained on the full batch with the same optimizer."""
    task = task_of(config)
    model = torch.nn.Sequential(*task.layers())
    opt = (torch.optim.Adam if config.optimizer == "adam" else torch.optim.SGD)(model.parameters(), lr=config.lr)
    losses, grads = [], None
    for step in range(steps):
        x, y = task.batch(step)
        opt.zero_grad(set_to_none=True)
        loss = task.loss(model(x), y)
        loss.backward()
        if step == 0:
            grads = {k: p.grad.clone() for k, p in model.named_parameters()}
        opt.step()
        losses.append(loss.item())
    return losses, grads, {k: v.clone() for k, v in model.state_dict().items()}


def assert_same_math(result, steps: int, rtol=1e-5, atol=1e-6):
    losses, grads, state = reference_run(result.config, steps)
    c = result.config
    label = f"{c.schedule} p={c.p} dp={c.dp} cp={c.cp} tp={c.tp} m={c.m} {c.model}"
    torch.testing.assert_close(torch.tensor(result.losses), torch.tensor(losses), rtol=rtol, atol=atol,
                               msg=lambda m: f"{label}: losses differ: {m}")
    assert set(result.grads) == set(grads), f"{label}: gradient names differ"
    for name, g in grads.items():
        torch.testing.assert_close(result.grads[name], g, rtol=rtol, atol=atol,
                                   msg=lambda m: f"{label}: gradient of {name} differs: {m}")
    for name, w in state.items():
        torch.testing.assert_close(result.state[name], w, rtol=rtol, atol=atol,
                                   msg=lambda m: f"{label}: weight {name} differs after {steps} steps: {m}")
