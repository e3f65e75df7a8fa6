#!/usr/bin/python3
"""Prints torch.optim trajectories that optimizer_test.cpp embeds as constants.

Run with Debian's interpreter (the one with torch):  /usr/bin/python3 torch_reference.py
Parameters are float32, as in cohort. Gradients follow grad(t, i) below, identical to the test.
"""
import math

import torch

P0 = [0.5, -1.2, 2.0, 0.3, -0.7]
STEPS = 5


def grad(t, i):
    return math.sin(0.7 * (i + 1) + 1.3 * t) * (1.0 + 0.1 * i)


def run(name, make_opt, clip=0.0):
    p = torch.nn.Parameter(torch.tensor(P0, dtype=torch.float32))
    opt = make_opt([p])
    norms = []
    for t in range(STEPS):
        p.grad = torch.tensor([grad(t, i) for i in range(len(P0))], dtype=torch.float32)
        if clip > 0:
            norms.append(float(torch.nn.utils.clip_grad_norm_([p], clip)))
        opt.step()
    vals = ", ".join("%.9ef" % v for v in p.detach().tolist())
    print("// %s" % name)
    print("constexpr float k%s[] = {%s};" % (name, vals))


torch.manual_seed(0)
print("// torch", torch.__version__)
run("TorchSgdMomentum", lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.01))
run("TorchSgdNesterov", lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01))
run("TorchAdamW", lambda ps: torch.optim.AdamW(ps, lr=0.01, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.1))
run("TorchAdamWClip", lambda ps: torch.optim.AdamW(ps, lr=0.01, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.1),
    clip=0.5)
