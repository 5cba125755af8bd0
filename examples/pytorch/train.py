"""The training loop of the example models (dlrm.py, wdl.py, deepfm.py,
dcn.py, seq.py): one trainer process of an ESD job, started by torchrun
on every node with ESD_NODE_DIR naming its node daemon's directory. The embedding
rows come from the node's cache (esd.torch), the dense model trains under
DistributedDataParallel over gloo (a model class with `unpooled = True`,
seq.py's, takes EmbeddingCollection's {name: Jagged} instead of the
pooled (m, tables, dim) tensor); rank 0 prints loss, AUC and samples/s;
the dense model is saved to NODE_DIR/dense.pt where training ends (its
end, or a graceful stop) and restored from it when the job resumes; with
--warm-start DIR a fresh job starts from an export's dense.pt."""
import argparse
import inspect
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "runtime", "python"))
import esd.torch as et  # noqa: E402


def dense_optimizer(model, lr, name="adam"):
    """The dense part's optimizer, the same on every trainer."""
    if name == "sgd":
        return torch.optim.SGD(model.parameters(), lr=lr)
    return torch.optim.Adam(model.parameters(), lr=lr)


def build(make_model, s):
    """make_model(tables, dim, ndense), with emb_width = the dims summed
    where the job's tables have dims of their own (model.dims: ebc(batch)
    is then (m, d_1 + ... + d_T)); a model that multiplies features
    pairwise (DLRM, DeepFM) takes no emb_width and needs one dim."""
    if len(set(s.dims)) == 1:
        return make_model(s.tables, s.dim, s.ndense)
    if "emb_width" not in inspect.signature(make_model).parameters:
        raise SystemExit("%s needs one dim for every table (its interaction multiplies "
                         "features pairwise); the job's model.dims are %s: use model.dim, or "
                         "a model that concatenates its features (wdl, dcn)"
                         % (make_model.__name__, s.dims))
    return make_model(s.tables, s.dim, s.ndense, emb_width=sum(s.dims))


def main(make_model, argv=None):
    ap = argparse.ArgumentParser(description="train %s on an ESD job" % make_model.__name__)
    ap.add_argument("--dense-lr", type=float, default=0.01)
    ap.add_argument("--dense-opt", choices=("adam", "sgd"), default="adam")
    ap.add_argument("--seed", type=int, default=1, help="seed of the dense weights")
    ap.add_argument("--pooling", default="sum",
                    help="sum, mean, or MODE,MODE,... one per table (bags)")
    ap.add_argument("--warm-start", metavar="DIR",
                    help="a fresh job's dense model from DIR/dense.pt (tools/esd-export "
                         "--torch; the job's ps.warm_start loads the rows)")
    a = ap.parse_args(argv)

    s = et.Session(seed=a.seed)
    if getattr(make_model, "unpooled", False):  # a sequence model (seq.py): rows unpooled
        ebc = s.embeddings(pooling="none")
    else:
        ebc = s.embeddings(a.pooling.split(",") if "," in a.pooling else a.pooling)
    model = s.distributed(build(make_model, s))
    opt = dense_optimizer(model, a.dense_lr, a.dense_opt)
    rows = s.row_optimizer()
    # a resumed job: the dense model of its iteration; a fresh one: the export's
    s.restore(model, opt, warm_start=a.warm_start)
    for batch in s.batches():
        logits = model(ebc(batch), batch.dense)
        loss = et.bce(logits, batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        rows.step(loss)
        s.progress(logits, batch, loss)
    s.save(model, opt)
    s.close()
