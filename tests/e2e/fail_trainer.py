"""A PyTorch trainer of test_trainer_fail.py: esd.torch's session, a linear
model on the pooled rows; with --raise-at ITER it raises ValueError in that
iteration's step (a bug in the user's script), writing the time of the
raise to --raise-stamp first.

usage: fail_trainer.py [--raise-at ITER --raise-stamp FILE]
(ESD_NODE_DIR, RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT in the environment)
"""
import argparse
import time

import torch

import esd.torch as et

ap = argparse.ArgumentParser()
ap.add_argument("--raise-at", type=int, default=0)
ap.add_argument("--raise-stamp")
a = ap.parse_args()

s = et.Session(log_every=0, timeout_s=30)
ebc = s.embeddings()
model = s.distributed(et.mlp((s.dim + s.ndense, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
rows = s.row_optimizer()
for batch in s.batches():
    x = torch.cat([ebc(batch).mean(1), batch.dense], 1)
    logits = model(x).squeeze(1)
    loss = et.bce(logits, batch)
    if batch.iter == a.raise_at:
        with open(a.raise_stamp, "w") as f:
            f.write("%.6f\n" % time.time())
        raise ValueError("injected bug at iteration %d: tensor of shape %s"
                         % (batch.iter, tuple(x.shape)))
    opt.zero_grad()
    loss.backward()
    opt.step()
    rows.step(loss)
    s.progress(logits, batch, loss)
s.close()
