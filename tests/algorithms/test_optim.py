"""The lean optimizers follow torch.optim's trajectories step for step."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from ring_actors.algorithms import optim


def _trajectory(make, steps: int = 6) -> list[torch.Tensor]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(), torch.nn.Linear(4, 3))
    x, y = torch.randn(16, 5), torch.randint(0, 3, (16,))
    optimizer = make(model.parameters())
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        (
            lambda p: optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=1e-3),
            lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=1e-3),
        ),
        (lambda p: optim.SGD(p, lr=0.05), lambda p: torch.optim.SGD(p, lr=0.05)),
        (
            lambda p: optim.Adam(p, lr=0.01, weight_decay=1e-4),
            lambda p: torch.optim.Adam(p, lr=0.01, weight_decay=1e-4),
        ),
    ],
)
def test_same_updates_as_torch_optim(ours, theirs):
    for mine, reference in zip(_trajectory(ours), _trajectory(theirs), strict=True):
        torch.testing.assert_close(mine, reference, rtol=1e-5, atol=1e-6)


def test_a_changed_learning_rate_takes_effect():
    p = torch.nn.Parameter(torch.ones(2))
    opt = optim.SGD([p], lr=1.0)
    opt.param_groups[0]["lr"] = 0.5
    p.grad = torch.ones(2)
    opt.step()
    assert p.tolist() == [0.5, 0.5]


@pytest.mark.slow
def test_training_with_them_never_imports_the_compiler():
    code = (
        "import sys, torch\n"
        "from ring_actors.algorithms import optim\n"
        "m = torch.nn.Linear(3, 2)\n"
        "for o in (optim.SGD(m.parameters(), lr=0.1, momentum=0.9), optim.Adam(m.parameters())):\n"
        "    o.zero_grad(); m(torch.randn(4, 3)).sum().backward(); o.step()\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
