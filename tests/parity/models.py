"""PyTorch mirrors of cohort's built-in GPT and CNN (core/models/{gpt,cnn}.cpp), with the same
parameter names and layouts, so a state_dict maps one to one onto cohort's parameters.

GPT: pre-LN GPT-2; names as Hugging Face GPT2LMHeadModel without "transformer."; weights
[out, in] (nn.Linear's layout); attention is causal MHA over a fused qkv laid out [q|k|v], head h
at columns h*D..(h+1)*D of each part, scale 1/sqrt(D); GELU with the tanh approximation; tied
output head. CNN: conv3x3 (no bias) - groupnorm - relu stem, one residual block per stage with a
1x1-conv + groupnorm shortcut where the shape changes, global average pooling, a linear head.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(width, 3 * width)
        self.c_proj = nn.Linear(width, width)

    def forward(self, x):  # x: (B, T, C)
        B, T, C = x.shape
        H, D = self.heads, C // self.heads
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, H, D).transpose(1, 2) for t in (q, k, v))  # (B, H, T, D)
        s = (q @ k.transpose(-2, -1)) / math.sqrt(D)
        mask = torch.ones(T, T, dtype=torch.bool).triu(1)
        s = s.masked_fill(mask, float("-inf"))
        y = (s.softmax(dim=-1) @ v).transpose(1, 2).reshape(B, T, C)
        return self.c_proj(y)


class Mlp(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.c_fc = nn.Linear(width, 4 * width)
        self.c_proj = nn.Linear(4 * width, width)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, width, heads, eps):
        super().__init__()
        self.ln_1 = nn.LayerNorm(width, eps=eps)
        self.attn = Attention(width, heads)
        self.ln_2 = nn.LayerNorm(width, eps=eps)
        self.mlp = Mlp(width)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Gpt(nn.Module):
    def __init__(self, vocab, context, layers, width, heads, eps=1e-5):
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(context, width)
        self.h = nn.ModuleList(Block(width, heads, eps) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width, eps=eps)
        # GPT-2's initialisation: N(0, 0.02), residual projections scaled by 1/sqrt(2 L).
        for name, p in self.named_parameters():
            if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name == "ln_f.weight":
                nn.init.ones_(p)
            elif name.endswith(".bias"):
                nn.init.zeros_(p)
            else:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith("c_proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, tokens, targets):  # tokens, targets: (B, T) int64
        T = tokens.shape[1]
        x = self.wte(tokens) + self.wpe.weight[:T]
        for block in self.h:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.t()  # (B, T, V)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


class ResBlock(nn.Module):
    def __init__(self, cin, cout, stride, groups, eps):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.norm1 = nn.GroupNorm(groups, cout, eps=eps)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.norm2 = nn.GroupNorm(groups, cout, eps=eps)
        self.shortcut = None
        if stride != 1 or cin != cout:
            self.shortcut = nn.Module()
            self.shortcut.conv = nn.Conv2d(cin, cout, 1, stride, 0, bias=False)
            self.shortcut.norm = nn.GroupNorm(groups, cout, eps=eps)

    def forward(self, x):
        h = F.relu(self.norm1(self.conv1(x)))
        h = self.norm2(self.conv2(h))
        s = x if self.shortcut is None else self.shortcut.norm(self.shortcut.conv(x))
        return F.relu(h + s)


class Cnn(nn.Module):
    def __init__(self, channels=1, classes=10, widths=(16, 32, 64), groups=8, eps=1e-5):
        super().__init__()
        self.stem = nn.Module()
        self.stem.conv = nn.Conv2d(channels, widths[0], 3, 1, 1, bias=False)
        self.stem.norm = nn.GroupNorm(groups, widths[0], eps=eps)
        cin = widths[0]
        for s, w in enumerate(widths):
            setattr(self, f"layer{s + 1}", nn.ModuleList([ResBlock(cin, w, 2 if s > 0 else 1, groups, eps)]))
            cin = w
        self.stages = len(widths)
        self.head = nn.Linear(cin, classes)

    def forward(self, x, y):  # x: (B, 1, 28, 28), y: (B,) int64
        h = F.relu(self.stem.norm(self.stem.conv(x)))
        for s in range(self.stages):
            for block in getattr(self, f"layer{s + 1}"):
                h = block(h)
        h = h.mean(dim=(2, 3))
        return F.cross_entropy(self.head(h), y)
