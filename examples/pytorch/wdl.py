"""Wide & Deep (Cheng et al., 2016) on an ESD job: a linear (wide) term
and a ReLU MLP (deep), both over the embeddings and the dense features.

    torchrun --nnodes N --node_rank R ... wdl.py      # ESD_NODE_DIR set
    /usr/bin/python3 examples/pytorch/run.py --model wdl    # a local job
"""
import torch
from torch import nn

import train
from train import et


class WDL(nn.Module):
    def __init__(self, tables, dim, ndense, hidden=(32, 16), emb_width=None):
        super().__init__()
        # emb_width: the features side by side when tables have dims of
        # their own (model.dims); else tables x dim
        n_in = (emb_width or tables * dim) + ndense
        self.wide = nn.Linear(n_in, 1)
        self.deep = nn.Sequential(et.mlp((n_in,) + hidden, relu_last=True),
                                  nn.Linear(hidden[-1], 1))

    def forward(self, emb, dense):
        x = torch.cat([emb.flatten(1), dense], 1)
        return (self.wide(x) + self.deep(x)).squeeze(1)


if __name__ == "__main__":
    train.main(WDL)
