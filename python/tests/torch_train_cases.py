"""PyTorch/XLA training loops as users write them, run by test_torch_xla.py: `python3
torch_train_cases.py KIND OUT.npz` trains KIND (mlp, cnn: a small CNN with batch norm, encoder:
a transformer encoder layer) for three steps on torch_xla.device() (PJRT_DEVICE=TPUSIM) and on
the CPU from the same initial weights, and saves both runs' losses and final parameters and
buffers, with the last step's tpusim report figures."""
import sys

import numpy as np
import torch
import torch.nn as nn
import torch_xla
import torch_xla.core.xla_model as xm


def make(kind):
    torch.manual_seed(0)
    if kind == "mlp":
        model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))
        x, y = torch.randn(16, 32), torch.randint(0, 10, (16,))
    elif kind == "cnn":
        model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Flatten(), nn.Linear(8 * 4 * 4, 10))
        x, y = torch.randn(8, 3, 8, 8), torch.randint(0, 10, (8,))
    else:
        model = nn.Sequential(nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0,
                                                         batch_first=True), nn.Flatten(), nn.Linear(32 * 6, 10))
        x, y = torch.randn(4, 6, 32), torch.randint(0, 10, (4,))
    return model, x, y


def train(kind, device, steps=3):
    model, x, y = make(kind)
    model = model.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
    x, y = x.to(device), y.to(device)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        if device.type == "xla":
            xm.optimizer_step(opt)
            torch_xla.sync()
        else:
            opt.step()
        losses.append(loss.detach().cpu().item())
    state = {k: v.detach().cpu().numpy() for k, v in model.state_dict().items()}
    return np.array(losses, np.float32), state


kind = sys.argv[1]
lx, sx = train(kind, torch_xla.device())
import tpusim.pjrt  # noqa: E402

report = tpusim.pjrt.last_report()
runs, name = tpusim.pjrt.executions()
lc, sc = train(kind, torch.device("cpu"))
out = {"xla.loss": lx, "cpu.loss": lc, "report.seconds": np.array(report["step"]["seconds"]),
       "report.runs": np.array(runs), "report.name": np.array(name)}
out.update({"xla." + k: v for k, v in sx.items()})
out.update({"cpu." + k: v for k, v in sc.items()})
np.savez(sys.argv[2], **out)
