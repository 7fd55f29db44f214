"""The genomics benchmark workflow (SubZero section II-B, Fig. 2): predicting the relapse of
medulloblastoma patients with a naive Bayesian model (after Tamayo et al., JCO 2011).

A training and a test patient-by-feature matrix (96 patients each, column 0 the relapse
outcome, then 55 features: histology, 30 gene expression levels, 24 binary genetic
abnormalities), generated deterministically and scaled by replicating the patients.
UDF E extracts the complete cases of the training matrix, G those of the test matrix;
ten built-in operators standardize them with the training statistics and discretize
the expression levels; UDF F builds the model (each feature value's contribution to the
log-odds of relapse), UDF H predicts each test patient's log-odds, and built-ins turn
them into probabilities and relapse calls.

All four UDFs are payload operators (and write FULL lineage on request):

- E, G: an output cell is a copy of one input cell; the payload is the source row.
- F: a model cell (feature, value) depends on the training cells of the patients with
  that value and on their outcomes; the payload is a bitmap of those patients.
- H: a prediction depends on the test patient's features and on the model cells of the
  patient's values; the payload is the patient's values.
"""

from __future__ import annotations

import numpy as np
from scipy import special

from subzero.errors import WorkflowError
from subzero.modes import Mode
from subzero.operator import Operator
from subzero.operators.elementwise import Apply, Divide, Subtract, Threshold
from subzero.operators.reductions import Mean, Std
from subzero.workflow import Workflow

__all__ = ["build", "patients", "CompleteCases", "NaiveBayes", "Predict", "discretize", "UDFS",
           "COLUMNS", "KINDS", "LEVELS"]

N_PATIENTS, N_EXPRESSION, N_ABNORMAL = 96, 30, 24
COLUMNS = 1 + 1 + N_EXPRESSION + N_ABNORMAL            # outcome + 55 features
OUTCOME, CATEGORICAL, EXPRESSION, BINARY = 0, 1, 2, 3
#: the kind of every column (the third input, a 1 x COLUMNS row)
KINDS = np.array([[OUTCOME, CATEGORICAL] + [EXPRESSION] * N_EXPRESSION + [BINARY] * N_ABNORMAL], np.int8)
LEVELS = 4                                               # values a discrete feature takes at most
QUICK_SCALE, SCALE = 1, 100
#: node name -> the paper's UDF letter
UDFS = {"train_cases": "E", "model": "F", "test_cases": "G", "score": "H"}


# -- data ---------------------------------------------------------------------------------
def patients(n: int, seed: int) -> np.ndarray:
    """``n`` patients x COLUMNS: relapse (0/1), histology (classic, desmoplastic, large-cell/
    anaplastic, MBEN), log2 expression levels (some genes shifted in relapsing patients),
    binary abnormalities (some more frequent in relapse); 5% of patients miss one value."""
    rng = np.random.default_rng(seed)
    relapse = rng.random(n) < 0.3
    hist_p = np.where(relapse[:, None], [0.5, 0.05, 0.35, 0.10], [0.6, 0.2, 0.1, 0.1])
    histology = (rng.random(n)[:, None] > np.cumsum(hist_p, axis=1)).sum(axis=1)
    gene_mean = np.random.default_rng(1).uniform(5.0, 11.0, N_EXPRESSION)
    shift = np.zeros(N_EXPRESSION)
    shift[:8] = np.random.default_rng(2).choice([-1.0, 1.0], 8)
    expression = rng.normal(gene_mean, 1.5, (n, N_EXPRESSION)) + relapse[:, None] * shift
    prevalence = np.random.default_rng(3).uniform(0.05, 0.4, N_ABNORMAL)
    odds = np.ones(N_ABNORMAL)
    odds[:6] = 3.0
    p = np.where(relapse[:, None], prevalence * odds / (1 + prevalence * (odds - 1)), prevalence)
    abnormal = (rng.random((n, N_ABNORMAL)) < p).astype(float)
    abnormal[np.arange(N_ABNORMAL) % n, np.arange(N_ABNORMAL)] = 1.0   # no constant column
    abnormal[(np.arange(N_ABNORMAL) + 1) % n, np.arange(N_ABNORMAL)] = 0.0
    out = np.column_stack([relapse.astype(float), histology.astype(float), expression, abnormal])
    missing = np.flatnonzero(rng.random(n) < 0.05)
    out[missing, 2 + rng.integers(0, N_EXPRESSION, len(missing))] = np.nan
    return out


def discretize(z, raw, kinds):
    """Expression levels become low/normal/high (z below -0.5, within, above 0.5); every
    other column keeps its (already discrete) value."""
    level = np.digitize(z, [-0.5, 0.5]).astype(np.float64)
    return np.where(kinds == EXPRESSION, level, raw)


# -- UDFs -----------------------------------------------------------------------------------
class CompleteCases(Operator):
    """UDFs E and G: the rows without a missing value (NaN).  Output cell ``(r, c)`` copies
    input cell ``(src[r], c)``; the payload of every cell of row ``r`` is ``src[r]``."""

    def supported_modes(self):
        return {Mode.PAY, Mode.FULL}

    def run(self, ctx, x):
        src = np.flatnonzero(~np.isnan(x).any(axis=1))
        out = np.asarray(x)[src]
        cells = np.argwhere(np.ones(out.shape, bool))
        if Mode.FULL in ctx.modes:
            ids = np.arange(len(cells))
            ctx.lwrite_many(cells, np.column_stack([src[cells[:, 0]], cells[:, 1]]), out_pair=ids, in_pair=[ids])
        if Mode.PAY in ctx.modes:
            ctx.lwrite(cells, payload=src[cells[:, 0]].astype("<i4").reshape(-1, 1))
        return out

    def map_p_pairs(self, cells, payload, i):
        cells = np.asarray(cells, np.int64)
        src = int(np.frombuffer(payload, "<i4")[0])
        return np.arange(len(cells), dtype=np.int64), np.column_stack([np.full(len(cells), src), cells[:, 1]])

    def map_p(self, cells, payload, i):
        return np.unique(self.map_p_pairs(cells, payload, i)[1], axis=0)


class NaiveBayes(Operator):
    """UDF F: the model, ``(COLUMNS, LEVELS)``.  Row 0 holds the prior log-odds of relapse
    (cell ``(0, 0)``); cell ``(1 + f, v)`` is value ``v`` of feature ``f``'s contribution
    to the log-odds: ``log P(v | relapse) - log P(v | no relapse)`` (Laplace smoothing).

    Lineage of ``(1 + f, v)``: training cells ``(p, 1 + f)`` and ``(p, 0)`` of the
    patients ``p`` whose feature ``f`` is ``v``; of ``(0, 0)``: every outcome.  Model
    cells no patient contributes to have no lineage.  The payload is the patients' bitmap.
    """

    def __init__(self, levels: int = LEVELS, alpha: float = 1.0):
        self.levels, self.alpha = int(levels), float(alpha)

    def supported_modes(self):
        return {Mode.PAY, Mode.FULL}

    def infer_output_shape(self, input_shapes):
        return (input_shapes[0][1], self.levels)

    def run(self, ctx, d):
        d = np.asarray(d)
        y, x = d[:, 0].astype(bool), d[:, 1:].astype(np.int64)
        n, f = x.shape
        if x.size and (x.min() < 0 or x.max() >= self.levels):
            raise WorkflowError(f"NaiveBayes: feature values must be 0..{self.levels - 1}, got {x.min()}..{x.max()}")
        pair = (1 + np.arange(f)) * self.levels + x                       # model cell id of each (p, f)
        counts = [np.bincount(pair[rows].reshape(-1), minlength=d.shape[1] * self.levels) for rows in (y, ~y)]
        totals = [max(int(y.sum()), 1), max(int((~y).sum()), 1)]
        k, a = self.levels, self.alpha
        model = np.log((counts[0] + a) / (totals[0] + k * a)) - np.log((counts[1] + a) / (totals[1] + k * a))
        model = model.reshape(d.shape[1], k)
        model[0] = 0.0
        model[0, 0] = np.log(totals[0] / totals[1])
        members = np.zeros((d.shape[1] * k, n), bool)                      # model cell x patient
        members[pair.reshape(-1), np.repeat(np.arange(n), f)] = True
        members[0] = True
        used = np.flatnonzero(members.any(axis=1))
        cells = np.column_stack([used // k, used % k])
        if Mode.FULL in ctx.modes:
            owner, patient = np.nonzero(members[used])
            column = cells[owner, 0]
            feature = column > 0
            ins = np.concatenate([np.column_stack([patient, np.zeros_like(patient)]),
                                  np.column_stack([patient[feature], column[feature]])])
            ctx.lwrite_many(cells, ins, out_pair=np.arange(len(used)),
                            in_pair=[np.concatenate([owner, owner[feature]])])
        if Mode.PAY in ctx.modes:
            ctx.lwrite(cells, payload=np.packbits(members[used], axis=1))
        return model

    def map_p_pairs(self, cells, payload, i):
        cells = np.asarray(cells, np.int64)
        n = self.input_shapes[0][0]
        patient = np.flatnonzero(np.unpackbits(np.frombuffer(payload, np.uint8), count=n))
        owner = np.repeat(np.arange(len(cells), dtype=np.int64), len(patient))
        column = np.repeat(cells[:, 0], len(patient))
        rows = np.tile(patient, len(cells))
        outcome = np.column_stack([rows, np.zeros_like(rows)])
        feature = column > 0
        coords = np.concatenate([outcome, np.column_stack([rows[feature], column[feature]])])
        return np.concatenate([owner, owner[feature]]), coords

    def map_p(self, cells, payload, i):
        return np.unique(self.map_p_pairs(cells, payload, i)[1], axis=0)


class Predict(Operator):
    """UDF H: each test patient's log-odds of relapse, ``model[0, 0] + sum_f model[1 + f, x_f]``.

    Inputs: the model and the discretized test matrix.  Lineage of prediction ``q``: model
    cells ``(0, 0)`` and ``(1 + f, x_qf)``, test cells ``(q, 1 + f)`` (not the outcome
    column).  The payload is the patient's values ``x_q`` (one byte per feature).
    """

    def supported_modes(self):
        return {Mode.PAY, Mode.FULL}

    def infer_output_shape(self, input_shapes):
        (rows, levels), (n, cols) = input_shapes
        if rows != cols:
            raise WorkflowError(f"Predict: the model has {rows} rows, the test matrix {cols} columns")
        return (n,)

    def _model_cells(self, x: np.ndarray) -> np.ndarray:
        """``(n, 1 + F, 2)`` model coordinates each patient's prediction reads."""
        n, f = x.shape
        rows = np.broadcast_to(np.arange(1 + f), (n, 1 + f))
        values = np.concatenate([np.zeros((n, 1), np.int64), x], axis=1)
        return np.stack([rows, values], axis=-1)

    def run(self, ctx, model, d):
        x = np.asarray(d)[:, 1:].astype(np.int64)
        n, f = x.shape
        score = model[0, 0] + np.asarray(model)[1 + np.arange(f), x].sum(axis=1)
        if Mode.FULL in ctx.modes:
            out = np.arange(n)[:, None]
            test = np.stack([np.repeat(np.arange(n), f), np.tile(1 + np.arange(f), n)], axis=1)
            ctx.lwrite_many(out, self._model_cells(x).reshape(-1, 2), test, out_pair=np.arange(n),
                            in_pair=[np.repeat(np.arange(n), 1 + f), np.repeat(np.arange(n), f)])
        if Mode.PAY in ctx.modes:
            ctx.lwrite(np.arange(n)[:, None], payload=x.astype(np.uint8))
        return score

    def map_p_pairs(self, cells, payload, i):
        cells = np.asarray(cells, np.int64)
        x = np.frombuffer(payload, np.uint8).astype(np.int64)
        if i == 0:
            coords = np.tile(self._model_cells(x[None])[0], (len(cells), 1))
            return np.repeat(np.arange(len(cells), dtype=np.int64), 1 + len(x)), coords
        coords = np.stack([np.repeat(cells[:, 0], len(x)), np.tile(1 + np.arange(len(x)), len(cells))], axis=1)
        return np.repeat(np.arange(len(cells), dtype=np.int64), len(x)), coords

    def map_p(self, cells, payload, i):
        return np.unique(self.map_p_pairs(cells, payload, i)[1], axis=0)


# -- the workflow ---------------------------------------------------------------------------
def build(quick: bool = False, scale: int | None = None) -> tuple[Workflow, dict[str, np.ndarray]]:
    """The genomics workflow and its inputs: training and test matrices of 96 patients
    replicated ``scale`` times (default 100; 1 when ``quick``) and the column kinds.

    Examples
    --------
    >>> wf, inputs = build(scale=1)
    >>> inputs["train"].shape, len([n for n in wf.nodes if not n.is_input])
    ((96, 56), 14)
    """
    scale = (QUICK_SCALE if quick else SCALE) if scale is None else int(scale)
    if scale < 1:
        raise WorkflowError(f"genomics scale must be >= 1, got {scale}")
    inputs = {"train": np.tile(patients(N_PATIENTS, seed=10), (scale, 1)),
              "test": np.tile(patients(N_PATIENTS, seed=20), (scale, 1)),
              "kinds": KINDS.astype(np.float64)}
    wf = Workflow("genomics")
    train, test, kinds = wf.input("train"), wf.input("test"), wf.input("kinds")
    tr = wf.add(CompleteCases(), train, name="train_cases")                  # UDF E
    mu = wf.add(Mean(axis=0), tr, name="train_mean")
    sd = wf.add(Std(axis=0), tr, name="train_std")
    tr_z = wf.add(Divide(), wf.add(Subtract(), tr, mu, name="train_centred"), sd, name="train_z")
    tr_d = wf.add(Apply(discretize, nin=3), tr_z, tr, kinds, name="train_discrete")
    model = wf.add(NaiveBayes(), tr_d, name="model")                         # UDF F
    te = wf.add(CompleteCases(), test, name="test_cases")                    # UDF G
    te_z = wf.add(Divide(), wf.add(Subtract(), te, mu, name="test_centred"), sd, name="test_z")
    te_d = wf.add(Apply(discretize, nin=3), te_z, te, kinds, name="test_discrete")
    score = wf.add(Predict(), model, te_d, name="score")                     # UDF H
    prob = wf.add(Apply(special.expit), score, name="probability")
    wf.add(Threshold(0.5), prob, name="relapse")
    return wf, inputs
