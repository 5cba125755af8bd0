"""DeepFM (Guo et al., 2017) on an ESD job: a first-order linear term, the
factorisation machine's pairwise interactions of the embeddings, and a
deep MLP over the same embeddings.

    torchrun --nnodes N --node_rank R ... deepfm.py   # ESD_NODE_DIR set
    /usr/bin/python3 examples/pytorch/run.py --model deepfm # a local job
"""
import torch
from torch import nn

import train
from train import et


class DeepFM(nn.Module):
    def __init__(self, tables, dim, ndense, hidden=(32, 16)):
        super().__init__()
        n_in = tables * dim + ndense
        self.first = nn.Linear(n_in, 1)
        self.deep = nn.Sequential(et.mlp((n_in,) + hidden, relu_last=True),
                                  nn.Linear(hidden[-1], 1))

    def forward(self, emb, dense):
        x = torch.cat([emb.flatten(1), dense], 1)
        s = emb.sum(1)
        fm = 0.5 * (s * s - (emb * emb).sum(1)).sum(1, keepdim=True)
        return (self.first(x) + fm + self.deep(x)).squeeze(1)


if __name__ == "__main__":
    train.main(DeepFM)
