"""DLRM (Naumov et al., 2019) on an ESD job: a bottom MLP maps the dense
features to an embedding-sized vector, the pairwise dot products of it and
the sparse features' embeddings feed a top MLP.

    torchrun --nnodes N --node_rank R ... dlrm.py     # ESD_NODE_DIR set
    /usr/bin/python3 examples/pytorch/run.py --model dlrm   # a local job
"""
import torch
from torch import nn

import train
from train import et


class DLRM(nn.Module):
    def __init__(self, tables, dim, ndense, bottom=(32,), top=(32, 16)):
        super().__init__()
        self.bottom = et.mlp((ndense,) + bottom + (dim,), relu_last=True)
        n = tables + 1
        self.pairs = torch.triu_indices(n, n, 1)
        self.top = nn.Sequential(et.mlp((dim + n * (n - 1) // 2,) + top, relu_last=True),
                                 nn.Linear(top[-1], 1))

    def forward(self, emb, dense):
        x = self.bottom(dense)
        z = torch.cat([x.unsqueeze(1), emb], 1)
        dots = torch.bmm(z, z.transpose(1, 2))[:, self.pairs[0], self.pairs[1]]
        return self.top(torch.cat([x, dots], 1)).squeeze(1)


if __name__ == "__main__":
    train.main(DLRM)
