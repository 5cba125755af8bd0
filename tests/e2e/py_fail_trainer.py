"""A PyTorch trainer (esd.torch) with a bug on purpose, for the failure
tests (test_launch_failures under torchrun, test_trainer_fail under
esdcluster): the trainer of rank ESD_TEST_RAISE_RANK (if set) raises
ValueError at iteration ESD_TEST_RAISE_AT (default 5), printing
"ESD_TEST_RAISED <CLOCK_MONOTONIC seconds>" just before and, with
ESD_TEST_RAISE_STAMP, writing the wall-clock time of the raise to that
file; with ESD_TEST_HANG set it never attaches (it sleeps before joining
the other trainers), as one whose rendezvous hangs."""
import os
import sys
import time

if os.environ.get("ESD_TEST_HANG"):
    print("ESD_TEST_HANG: not joining the job", flush=True)
    time.sleep(3600)

import torch  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "runtime", "python"))
import esd.torch as et  # noqa: E402


def main():
    s = et.Session()
    ebc = s.embeddings()
    model = s.distributed(torch.nn.Linear(s.tables * s.dim + s.ndense, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    rows = s.row_optimizer()
    raise_rank = int(os.environ.get("ESD_TEST_RAISE_RANK", "-1"))
    raise_at = int(os.environ.get("ESD_TEST_RAISE_AT", "5"))
    for batch in s.batches():
        if batch.iter == raise_at and s.rank == raise_rank:
            print("ESD_TEST_RAISED %.6f" % time.monotonic(), flush=True)
            stamp = os.environ.get("ESD_TEST_RAISE_STAMP")
            if stamp:
                with open(stamp, "w") as f:
                    f.write("%.6f\n" % time.time())
            raise ValueError("deliberate bug at iteration %d of trainer rank %d"
                             % (raise_at, s.rank))
        x = torch.cat([ebc(batch).flatten(1), batch.dense], 1)
        logits = model(x).squeeze(1)
        loss = et.bce(logits, batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        rows.step(loss)
        s.progress(logits, batch, loss)
    s.close()


if __name__ == "__main__":
    main()
