"""The model zoo: the first small models a student writes, each a plain `nn.Module` with an example input.

The compiler's tests check every one against eager PyTorch (inference and a training step), the
benchmark times them, notebook 06 compiles the CNN. Sizes are small so a full-mode run takes seconds.

    mlp_gelu      Linear -> GELU -> Linear
    mlp_dropout   Linear -> ReLU -> Dropout -> Linear
    lenet         Conv2d -> ReLU -> MaxPool2d -> Conv2d -> BatchNorm2d -> ReLU -> MaxPool2d -> Linear
    resnet        a stem conv, one residual basic block (two 3x3 convs, batch norm, skip), global average pool
    llama         RMSNorm, rotary embeddings, causal scaled_dot_product_attention, SwiGLU
    encoder       nn.TransformerEncoderLayer (batch_first, eval)
    vit           patch embedding (a strided conv), a pre-norm block with SDPA (not causal), a class head
    small_cnn     conv, ReLU, max and average pooling, linear: the CNN trained on the simulated chip
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class MLP(nn.Module):
    def __init__(self, d_in: int = 32, hidden: int = 64, d_out: int = 10, activation: str = "gelu",
                 dropout: float = 0.0):
        super().__init__()
        self.fc1 = nn.Linear(d_in, hidden)
        self.act = nn.GELU() if activation == "gelu" else nn.ReLU()
        self.drop = nn.Dropout(dropout)
        self.fc2 = nn.Linear(hidden, d_out)

    def forward(self, x):
        return self.fc2(self.drop(self.act(self.fc1(x))))


class LeNet(nn.Module):
    """LeNet-style CNN for [N, 1, 16, 16] images, 10 classes."""

    def __init__(self, classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(6, 12, 3)
        self.bn = nn.BatchNorm2d(12)
        self.fc = nn.Linear(12 * 3 * 3, classes)

    def forward(self, x):
        x = self.pool(F.relu(self.conv1(x)))              # [N, 6, 8, 8]
        x = self.pool(F.relu(self.bn(self.conv2(x))))     # [N, 12, 3, 3]
        return self.fc(x.flatten(1))


class BasicBlock(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(x + self.bn2(self.conv2(y)))


class ResNet(nn.Module):
    """A stem conv (stride 2), one basic block, global average pooling, a linear head."""

    def __init__(self, channels: int = 8, classes: int = 10):
        super().__init__()
        self.stem = nn.Conv2d(3, channels, 3, stride=2, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(channels)
        self.block = BasicBlock(channels)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(channels, classes)

    def forward(self, x):
        x = F.relu(self.bn(self.stem(x)))
        x = self.block(x)
        return self.fc(self.pool(x).flatten(1))


def rotary_tables(T: int, head_dim: int, base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    inv = 1.0 / base ** (torch.arange(0, head_dim, 2).float() / head_dim)
    angles = torch.outer(torch.arange(T).float(), inv)                  # [T, hd/2]
    angles = torch.cat([angles, angles], dim=-1)                        # [T, hd]
    return angles.cos(), angles.sin()


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


class RMSNorm(nn.Module):
    """RMSNorm written out (pow, mean, rsqrt), as many Llama ports do."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class LlamaBlock(nn.Module):
    def __init__(self, dim: int = 32, n_head: int = 4, hidden: int = 64, T: int = 16, builtin_norm: bool = False):
        super().__init__()
        self.n_head = n_head
        norm = (lambda: nn.RMSNorm(dim, eps=1e-6)) if builtin_norm else (lambda: RMSNorm(dim))
        self.norm1, self.norm2 = norm(), norm()
        self.wqkv = nn.Linear(dim, 3 * dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        cos, sin = rotary_tables(T, dim // n_head)
        self.register_buffer("cos", cos)
        self.register_buffer("sin", sin)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.wqkv(self.norm1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        q = q * self.cos + rotate_half(q) * self.sin
        k = k * self.cos + rotate_half(k) * self.sin
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.wo(y.transpose(1, 2).reshape(B, T, C))
        h = self.norm2(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class ViTBlock(nn.Module):
    """Patch embedding (a 4x4 stride-4 conv), a class token, a pre-norm block with SDPA, a head."""

    def __init__(self, dim: int = 32, n_head: int = 4, patch: int = 4, image: int = 16, classes: int = 10):
        super().__init__()
        self.n_head = n_head
        self.patch = nn.Conv2d(3, dim, patch, stride=patch)
        n = (image // patch) ** 2
        self.pos = nn.Parameter(torch.randn(1, n, dim) * 0.02)
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2) + self.pos          # [B, n, dim]
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        x = x + self.mlp(self.ln2(x))
        return self.head(x.mean(dim=1))


class SmallCNN(nn.Module):
    """The CNN the training tests and `trnlab.data.images` train: conv, ReLU, max and average pooling
    and a linear classifier: small enough to train in well under a minute on the simulated chip. Images [N, 1, 12, 12]."""

    def __init__(self, classes: int = 4, channels: int = 8):
        super().__init__()
        self.conv1 = nn.Conv2d(1, channels, 3, padding=1)
        self.conv2 = nn.Conv2d(channels, channels, 3, stride=2, padding=1)
        self.fc = nn.Linear(channels * 3 * 3, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)            # [N, C, 6, 6]
        x = F.avg_pool2d(F.relu(self.conv2(x)), 1)            # [N, C, 3, 3]
        return self.fc(x.flatten(1))


def encoder_layer(dim: int = 32, n_head: int = 4) -> nn.Module:
    return nn.TransformerEncoderLayer(dim, n_head, dim_feedforward=64, dropout=0.1, batch_first=True)


def zoo(seed: int = 0) -> dict:
    """name -> (model, example input): every model of the zoo, weights from `seed`."""
    torch.manual_seed(seed)
    models = {
        "mlp_gelu": (MLP(activation="gelu"), torch.randn(4, 32)),
        "mlp_dropout": (MLP(activation="relu", dropout=0.1), torch.randn(4, 32)),
        "lenet": (LeNet(), torch.randn(2, 1, 16, 16)),
        "resnet": (ResNet(), torch.randn(2, 3, 16, 16)),
        "llama": (LlamaBlock(), torch.randn(2, 16, 32)),
        "llama_nn_rmsnorm": (LlamaBlock(builtin_norm=True), torch.randn(2, 16, 32)),
        "encoder": (encoder_layer(), torch.randn(2, 16, 32)),
        "vit": (ViTBlock(), torch.randn(2, 3, 16, 16)),
        "small_cnn": (SmallCNN(), torch.randn(4, 1, 12, 12)),
    }
    for model, _ in models.values():                  # batch norm statistics that are not the identity
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 1.5)
                nn.init.uniform_(m.weight, 0.5, 1.5)
                nn.init.uniform_(m.bias, -0.5, 0.5)
    return models


NAMES = ("mlp_gelu", "mlp_dropout", "lenet", "resnet", "llama", "llama_nn_rmsnorm", "encoder", "vit", "small_cnn")
TRAINABLE = ("mlp_gelu", "lenet", "resnet", "small_cnn")   # a torch.compile training step compiles, as eager
