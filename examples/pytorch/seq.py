"""A sequence model on an ESD job: every feature is a sequence, its IDs'
rows unpooled (esd.torch's EmbeddingCollection), padded to seq_len
(Jagged.to_padded); a target attention per feature, with the dense
features as the query and a learned bias per position, weighs its rows
(a one-ID feature is its row); a Wide & Deep style top MLP takes the
features side by side with the dense ones. A multi-hot table (a bag) is
thus a history the model attends over instead of summing it.

    torchrun --nnodes N --node_rank R ... seq.py      # ESD_NODE_DIR set
    /usr/bin/python3 examples/pytorch/run.py --model seq --bag 0=3:8 --bag 5=2:8

Bags longer than seq_len (8) are cut to their first seq_len IDs; the rest
get no gradient. An empty bag is a zero vector.
"""
import math

import torch
from torch import nn

import train
from train import et


def padded(rows, length):
    """(seq (m, T, length, dim), mask (m, T, length)) of {name: Jagged},
    the features in the dict's order."""
    seqs, masks = zip(*(j.to_padded(length) for j in rows.values()))
    return torch.stack(seqs, 1), torch.stack(masks, 1)


def jagged(rows, off, T):
    """{f0..: Jagged} of rows (nkeys, dim) laid out bag by bag sample-major
    (off: the n * T + 1 bag offsets from 0, as esdio.read_bags gives them):
    what EmbeddingCollection returns for such a batch (evaluation)."""
    rows = torch.as_tensor(rows)
    off = torch.as_tensor(off, dtype=torch.int64)
    lens = torch.diff(off).view(-1, T)
    table = torch.arange(T).repeat(lens.shape[0])
    of_key = torch.repeat_interleave(table, lens.reshape(-1))
    return {"f%d" % t: et.Jagged(rows[of_key == t], lens[:, t].contiguous(), None)
            for t in range(T)}


class SEQ(nn.Module):
    unpooled = True  # train.py: s.embeddings(pooling="none")

    def __init__(self, tables, dim, ndense, seq_len=8, hidden=(32, 16)):
        super().__init__()
        self.seq_len = seq_len
        self.query = et.mlp((ndense, 16, dim))  # a query per sample
        self.pos = nn.Parameter(torch.zeros(tables, seq_len))  # per feature and position
        n_in = tables * dim + ndense
        self.top = nn.Sequential(et.mlp((n_in,) + hidden, relu_last=True),
                                 nn.Linear(hidden[-1], 1))

    def forward(self, rows, dense):
        seq, mask = padded(rows, self.seq_len)  # (m, T, L, dim), (m, T, L)
        q = self.query(dense)
        score = torch.einsum("mtld,md->mtl", seq, q) / math.sqrt(seq.shape[-1]) + self.pos
        # finite fill, then the mask again: an empty bag weighs nothing (no NaN)
        w = torch.softmax(score.masked_fill(~mask, -1e9), 2) * mask
        pooled = (w.unsqueeze(3) * seq).sum(2)  # (m, T, dim)
        return self.top(torch.cat([pooled.flatten(1), dense], 1)).squeeze(1)


if __name__ == "__main__":
    train.main(SEQ)
