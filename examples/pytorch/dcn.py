"""Deep & Cross Network (Wang et al., 2017) on an ESD job: cross layers
x_{l+1} = x0 (w_l . x_l) + b_l + x_l beside a deep MLP, both over
x0 = [embeddings | dense], joined by a final linear layer.

    torchrun --nnodes N --node_rank R ... dcn.py      # ESD_NODE_DIR set
    /usr/bin/python3 examples/pytorch/run.py --model dcn    # a local job
"""
import torch
from torch import nn

import train
from train import et


class DCN(nn.Module):
    def __init__(self, tables, dim, ndense, hidden=(32, 16), cross=2,
                 emb_width=None):
        super().__init__()
        # emb_width: the features side by side when tables have dims of
        # their own (model.dims); else tables x dim
        n_in = (emb_width or tables * dim) + ndense
        self.cw = nn.ParameterList([nn.Parameter(torch.empty(n_in).uniform_(-0.05, 0.05))
                                    for _ in range(cross)])
        self.cb = nn.ParameterList([nn.Parameter(torch.zeros(n_in)) for _ in range(cross)])
        self.deep = et.mlp((n_in,) + hidden, relu_last=True)
        self.out = nn.Linear(n_in + hidden[-1], 1)

    def forward(self, emb, dense):
        x0 = torch.cat([emb.flatten(1), dense], 1)
        x = x0
        for w, b in zip(self.cw, self.cb):
            x = x0 * (x @ w).unsqueeze(1) + b + x
        return self.out(torch.cat([x, self.deep(x0)], 1)).squeeze(1)


if __name__ == "__main__":
    train.main(DCN)
