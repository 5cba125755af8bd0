"""WDL, DeepFM and DCN over ESD embedding rows.

Every model takes the embedding rows of a batch as one (m, tables, dim)
tensor (the rows the node daemon holds in shared memory, gathered by slot)
and the dense features (m, ndense), and returns one logit per sample. The
embedding tables are not parameters of the module: they live in the
runtime (node caches and the PS), which applies the job's embedding
optimizer to the gradients the trainer writes back. Only the dense part
(the MLPs, the cross layers, the linear terms) is a torch parameter, kept
identical on every trainer by an all-reduce of its gradients.

No batch statistics (no BatchNorm, no dropout): a sample's output depends
on that sample only, so splitting the global batch over trainers changes
nothing but the float summation order.
"""
import torch
from torch import nn


def mlp(sizes):
    layers = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers)


class WDL(nn.Module):
    """Wide & Deep: a linear (wide) term over the dense features and the
    embeddings, plus a ReLU MLP (deep) over [embeddings | dense]."""

    def __init__(self, tables, dim, ndense, hidden=(32, 16)):
        super().__init__()
        n_in = tables * dim + ndense
        self.wide = nn.Linear(n_in, 1)
        self.deep = mlp((n_in,) + tuple(hidden))
        self.out = nn.Linear(hidden[-1], 1)

    def forward(self, emb, dense):
        x = torch.cat([emb.flatten(1), dense], 1)
        return (self.wide(x) + self.out(self.deep(x))).squeeze(1)


class DeepFM(nn.Module):
    """DeepFM: first-order linear term, the factorisation machine's
    pairwise interactions of the embeddings, and a deep MLP sharing the
    same embeddings."""

    def __init__(self, tables, dim, ndense, hidden=(32, 16)):
        super().__init__()
        n_in = tables * dim + ndense
        self.first = nn.Linear(n_in, 1)
        self.deep = mlp((n_in,) + tuple(hidden))
        self.out = nn.Linear(hidden[-1], 1)

    def forward(self, emb, dense):
        x = torch.cat([emb.flatten(1), dense], 1)
        s = emb.sum(1)
        fm = 0.5 * (s * s - (emb * emb).sum(1)).sum(1, keepdim=True)
        return (self.first(x) + fm + self.out(self.deep(x))).squeeze(1)


class DCN(nn.Module):
    """Deep & Cross Network: cross layers x_{l+1} = x0 (w_l . x_l) + b_l + x_l
    beside a deep MLP, both over x0 = [embeddings | dense], joined by a
    final linear layer."""

    def __init__(self, tables, dim, ndense, hidden=(32, 16), cross=2):
        super().__init__()
        n_in = tables * dim + ndense
        self.cw = nn.ParameterList([nn.Parameter(torch.empty(n_in).uniform_(-0.05, 0.05))
                                    for _ in range(cross)])
        self.cb = nn.ParameterList([nn.Parameter(torch.zeros(n_in)) for _ in range(cross)])
        self.deep = mlp((n_in,) + tuple(hidden))
        self.out = nn.Linear(n_in + hidden[-1], 1)

    def forward(self, emb, dense):
        x0 = torch.cat([emb.flatten(1), dense], 1)
        x = x0
        for w, b in zip(self.cw, self.cb):
            x = x0 * (x @ w).unsqueeze(1) + b + x
        return self.out(torch.cat([x, self.deep(x0)], 1)).squeeze(1)


MODELS = {"wdl": WDL, "deepfm": DeepFM, "dcn": DCN}


def build(name, tables, dim, ndense, seed):
    """The model named name, its parameters drawn from torch's generator
    seeded with seed: every trainer (and the single-process reference)
    builds the same initial weights."""
    torch.manual_seed(seed)
    return MODELS[name](tables, dim, ndense)


def dense_optimizer(model, lr, name="adam"):
    """The optimizer of the dense part (the same on every trainer):
    "adam" or "sgd"."""
    if name == "sgd":
        return torch.optim.SGD(model.parameters(), lr=lr)
    return torch.optim.Adam(model.parameters(), lr=lr)


def loss_sum(logits, labels):
    """Summed logistic loss of a (micro-)batch; divide by the global batch."""
    return nn.functional.binary_cross_entropy_with_logits(logits, labels, reduction="sum")
