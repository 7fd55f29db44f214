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

Lineage of the UDFs (exact: the perturbation oracle holds them to it):

- E, G (`CompleteCases`, payload): an output cell depends on the whole input row it was
  copied from (a NaN anywhere in it drops the row); the payload is the source row.
- F (`NaiveBayes`, mapping): a model cell (feature, value) depends on that feature of
  every training patient (any of them can take or leave the value) and on every outcome
  (the class totals); nothing is stored.
- H (`Predict`, payload): a prediction depends on the test patient's features and on the
  model cells of the patient's values; the payload is the patient's values.
"""

from __future__ import annotations

import numpy as np
from scipy import special

from subzero.context import Context
from subzero.errors import WorkflowError
from subzero.modes import Mode
from subzero.operator import Operator
from subzero.operators.elementwise import Apply, Divide, Subtract, Threshold
from subzero.operators.reductions import Mean, Std
from subzero.operators.value import Filter
from subzero.dag import Workflow
from subzero.tiling import Shape

__all__ = ["build", "build_gse7390", "gse7390", "er_positive", "GSE7390_UDFS", "patients", "CompleteCases", "NaiveBayes", "Predict", "discretize", "complete_rows", "UDFS",
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


def discretize(z: np.ndarray, raw: np.ndarray, kinds: np.ndarray) -> np.ndarray:
    """Expression levels become low/normal/high (z below -0.5, within, above 0.5); every
    other column keeps its (already discrete) value."""
    level = np.digitize(z, [-0.5, 0.5]).astype(np.float64)
    return np.where(kinds == EXPRESSION, level, raw)


# -- UDFs -----------------------------------------------------------------------------------
def complete_rows(x: np.ndarray) -> np.ndarray:
    """One bool per row: has it no missing value (NaN)?"""
    return ~np.isnan(np.asarray(x, np.float64)).any(axis=1)


class CompleteCases(Filter):
    """UDFs E and G: the rows without a missing value (NaN), a `Filter` on `complete_rows`.

    Lineage: output cell ``(r, c)`` depends on the whole input row ``src[r]`` it came from
    (one NaN anywhere in the row drops it), the payload of every cell of row ``r`` is
    ``src[r]``.  Rows are identified by source (``lineage="source"``): a dropped row does
    not change the rows below it, it moves them; ``lineage="positional"`` counts that too.
    """

    def __init__(self, lineage: str = "source"):
        super().__init__(complete_rows, axis=0, lineage=lineage)

    def infer_output_shape(self, input_shapes: tuple[Shape, ...]) -> Shape | None:
        if len(input_shapes[0]) != 2:
            raise WorkflowError(f"CompleteCases takes a 2-D patients x columns matrix, got shape {input_shapes[0]}")
        return None


class NaiveBayes(Operator):
    """UDF F: the model, ``(COLUMNS, LEVELS)``.  Row 0 holds the prior log-odds of relapse
    (cell ``(0, 0)``; the rest of row 0 is 0); cell ``(1 + f, v)`` is value ``v`` of
    feature ``f``'s contribution to the log-odds: ``log P(v | relapse) - log P(v | no
    relapse)`` (Laplace smoothing ``alpha``).

    Lineage (dependence): ``(1 + f, v)`` depends on feature ``f`` of every patient (any
    patient's value can become ``v``, or stop being it) and on every outcome (the class
    totals and the class of each count); ``(0, 0)`` on every outcome; the other cells of
    row 0 on nothing.  That is a mapping of coordinates alone: ``MAP`` (nothing stored).
    Feature values must be integers in ``0..levels-1``.
    """

    entire_array_safe = False  # row 0 beyond (0, 0) reads nothing

    def __init__(self, levels: int = LEVELS, alpha: float = 1.0):
        self.levels, self.alpha = int(levels), float(alpha)

    def supported_modes(self) -> set[Mode]:
        return {Mode.MAP}

    def infer_output_shape(self, input_shapes: tuple[Shape, ...]) -> Shape | None:
        if len(input_shapes[0]) != 2 or input_shapes[0][1] < 1:
            raise WorkflowError(f"NaiveBayes takes a 2-D patients x (outcome + features) matrix, got shape "
                                f"{input_shapes[0]}")
        return (input_shapes[0][1], self.levels)

    def run(self, ctx: Context, d: np.ndarray) -> np.ndarray:
        d = np.asarray(d, np.float64)
        y = d[:, 0] != 0
        values = d[:, 1:]
        ok = np.isfinite(values) & (values == np.round(values)) & (values >= 0) & (values < self.levels)
        if values.size and not ok.all():
            bad = values[~ok][0]
            raise WorkflowError(f"NaiveBayes: feature values must be integers 0..{self.levels - 1}, got {bad!r}")
        x = values.astype(np.int64)
        n, f = x.shape
        pair = (1 + np.arange(f)) * self.levels + x                       # model cell id of each (p, f)
        counts = [np.bincount(pair[rows].reshape(-1), minlength=d.shape[1] * self.levels) for rows in (y, ~y)]
        totals = [max(int(y.sum()), 1), max(int((~y).sum()), 1)]
        k, a = self.levels, self.alpha
        model = np.log((counts[0] + a) / (totals[0] + k * a)) - np.log((counts[1] + a) / (totals[1] + k * a))
        model = model.reshape(d.shape[1], k)
        model[0] = 0.0
        model[0, 0] = np.log(totals[0] / totals[1])
        return model

    # -- mapping: model row 1 + f reads columns 0 and 1 + f; (0, 0) column 0 ------------
    def _columns(self, rows: np.ndarray) -> list[np.ndarray]:
        """The input columns each model row reads (row 0: the outcome; others: + feature)."""
        return [np.array([0]) if r == 0 else np.array([0, r]) for r in rows]

    def map_b_pairs(self, cells: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray]:
        cells = np.asarray(cells, np.int64).reshape(-1, 2)
        n = self.input_shapes[0][0]
        reads = (cells[:, 1] == 0) | (cells[:, 0] > 0)                    # (0, v > 0) reads nothing
        width = np.where(cells[:, 0] > 0, 2, 1) * reads
        owner_col = np.repeat(np.arange(len(cells), dtype=np.int64), width)
        slot = np.arange(len(owner_col)) - np.repeat(np.cumsum(width) - width, width)
        column = np.where(slot == 0, 0, cells[owner_col, 0])
        owner = np.repeat(owner_col, n)
        coords = np.column_stack([np.tile(np.arange(n, dtype=np.int64), len(owner_col)), np.repeat(column, n)])
        return owner, coords

    def map_b(self, cells: np.ndarray, i: int) -> np.ndarray:
        return np.argwhere(self.map_b_mask(_mask(cells, self.output_shape), i)).astype(np.int64)

    def map_f(self, cells: np.ndarray, i: int) -> np.ndarray:
        return np.argwhere(self.map_f_mask(_mask(cells, self.input_shapes[0]), i)).astype(np.int64)

    def map_b_mask(self, mask: np.ndarray, i: int) -> np.ndarray:
        cells = np.asarray(mask, bool)
        out = np.zeros(self.input_shapes[0], bool)
        if cells[0, 0] or cells[1:].any():
            out[:, 0] = True
        out[:, 1:] = np.asarray(cells[1:].any(axis=1))[None, :]
        return out

    def map_f_mask(self, mask: np.ndarray, i: int) -> np.ndarray:
        cells = np.asarray(mask, bool)
        out = np.zeros(self.output_shape, bool)
        if cells[:, 0].any():
            out[0, 0] = True
            out[1:] = True
        out[1:] |= np.asarray(cells[:, 1:].any(axis=0))[:, None]
        return out


def _mask(cells, shape) -> np.ndarray:
    mask = np.zeros(shape, bool)
    cells = np.asarray(cells, np.int64).reshape(-1, len(shape))
    if len(cells):
        mask[tuple(cells.T)] = True
    return mask


class Predict(Operator):
    """UDF H: each test patient's log-odds of relapse, ``model[0, 0] + sum_f model[1 + f, x_f]``.

    Inputs: the model and the discretized test matrix.  Lineage of prediction ``q``: model
    cells ``(0, 0)`` and ``(1 + f, x_qf)``, test cells ``(q, 1 + f)`` (not the outcome
    column).  The payload is the patient's values ``x_q`` (one byte per feature).
    """

    def supported_modes(self) -> set[Mode]:
        return {Mode.PAY, Mode.FULL}

    def infer_output_shape(self, input_shapes: tuple[Shape, ...]) -> Shape | None:
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

    def run(self, ctx: Context, model: np.ndarray, d: np.ndarray) -> np.ndarray:
        values = np.asarray(d, np.float64)[:, 1:]
        levels = np.shape(model)[1]
        ok = np.isfinite(values) & (values == np.round(values)) & (values >= 0) & (values < levels)
        if values.size and not ok.all():
            raise WorkflowError(f"Predict: feature values must be integers 0..{levels - 1} (model columns), "
                                f"got {values[~ok][0]!r}")
        x = values.astype(np.int64)
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

    def map_p_pairs(self, cells: np.ndarray, payload: bytes, i: int) -> tuple[np.ndarray, np.ndarray]:
        cells = np.asarray(cells, np.int64)
        x = np.frombuffer(payload, np.uint8).astype(np.int64)
        if i == 0:
            coords = np.tile(self._model_cells(x[None])[0], (len(cells), 1))
            return np.repeat(np.arange(len(cells), dtype=np.int64), 1 + len(x)), coords
        coords = np.stack([np.repeat(cells[:, 0], len(x)), np.tile(1 + np.arange(len(x)), len(cells))], axis=1)
        return np.repeat(np.arange(len(cells), dtype=np.int64), len(x)), coords

    def map_p(self, cells: np.ndarray, payload: bytes, i: int) -> np.ndarray:
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


# -- real data: GSE7390 (scikit-survival) -------------------------------------------------------
#: GSE7390's node name -> role (E-H as in the synthetic workflow)
GSE7390_UDFS = UDFS
#: the columns before the gene expression levels: outcome, grade, ER status, age, tumour size
GSE7390_CLINICAL = ("e.tdm", "grade", "er", "age", "size")
_GRADES = {"well differentiated": 0.0, "intermediate": 1.0, "poorly differentiated": 2.0}
ER_COLUMN = 2


def gse7390() -> tuple[np.ndarray, np.ndarray, list[str]]:
    """GSE7390 (198 breast-cancer patients, Desmedt et al. 2007) as loaded by scikit-survival:
    ``(matrix, kinds, names)``.  Column 0 is the distant-metastasis event (``e.tdm``), then
    the histological grade (0-2; "unkown" is missing: NaN), ER status (0/1), age, tumour
    size and the 76 genes of the signature (log2 expression).  The categorical columns are
    encoded as numbers here: as scikit-survival gives them (categories, a structured
    outcome array) they are not workflow inputs (`subzero.inputs_check`)."""
    import pandas as pd
    from sksurv.datasets import load_breast_cancer

    from subzero.inputs_check import check_input_array

    features, outcome = load_breast_cancer()
    genes = [c for c in features.columns if c not in GSE7390_CLINICAL]
    frame = pd.DataFrame({
        "e.tdm": outcome["e.tdm"].astype(float),
        "grade": features["grade"].astype(str).map(_GRADES).astype(float),   # "unkown" -> NaN
        "er": (features["er"].astype(str) == "positive").astype(float),
        "age": features["age"].astype(float),
        "size": features["size"].astype(float),
    })
    frame = pd.concat([frame, features[genes].astype(float)], axis=1)
    kinds = [OUTCOME, CATEGORICAL, BINARY] + [EXPRESSION] * (frame.shape[1] - 3)
    return check_input_array("GSE7390", frame), np.array([kinds], np.float64), list(frame.columns)


def er_positive(x: np.ndarray) -> np.ndarray:
    """One bool per patient (row of a standardised matrix): is the tumour ER-positive?"""
    return np.asarray(x)[:, ER_COLUMN] > 0


def build_gse7390() -> tuple[Workflow, dict[str, np.ndarray]]:
    """The real-data workflow: 17 operators on GSE7390, split into even (training) and odd
    (test) patients.

    The synthetic workflow's steps (complete cases, standardisation with the training
    statistics, discretisation, the naive Bayes model, its predictions), plus a signature
    score of the ER-positive test patients: a `Filter` on ER status, the 76 genes
    (`Slice`), and a `MatMul` with the signature's weights (each gene's sign of association
    with metastasis in the training half, over 76: the fourth input).

    Examples
    --------
    >>> wf, inputs = build_gse7390()
    >>> inputs["train"].shape, len([n for n in wf.nodes if not n.is_input])
    ((99, 81), 17)
    """
    from subzero.operators import MatMul, Slice

    data, kinds, _ = gse7390()
    train, test = data[0::2], data[1::2]
    genes = slice(len(GSE7390_CLINICAL), data.shape[1])
    complete = train[complete_rows(train)]
    events = complete[:, 0] != 0
    direction = np.sign(complete[events, genes].mean(axis=0) - complete[~events, genes].mean(axis=0))
    n_genes = data.shape[1] - len(GSE7390_CLINICAL)
    inputs = {"train": train, "test": test, "kinds": kinds,
              "signature": (direction / n_genes).reshape(-1, 1)}
    wf = Workflow("gse7390")
    tr_in, te_in, kinds_in, weights = (wf.input(n) for n in ("train", "test", "kinds", "signature"))
    tr = wf.add(CompleteCases(), tr_in, name="train_cases")                  # E
    mu = wf.add(Mean(axis=0), tr, name="train_mean")
    sd = wf.add(Std(axis=0), tr, name="train_std")
    tr_z = wf.add(Divide(), wf.add(Subtract(), tr, mu, name="train_centred"), sd, name="train_z")
    tr_d = wf.add(Apply(discretize, nin=3), tr_z, tr, kinds_in, name="train_discrete")
    model = wf.add(NaiveBayes(), tr_d, name="model")                         # F
    te = wf.add(CompleteCases(), te_in, name="test_cases")                   # G
    te_z = wf.add(Divide(), wf.add(Subtract(), te, mu, name="test_centred"), sd, name="test_z")
    te_d = wf.add(Apply(discretize, nin=3), te_z, te, kinds_in, name="test_discrete")
    score = wf.add(Predict(), model, te_d, name="score")                     # H
    prob = wf.add(Apply(special.expit), score, name="probability")
    wf.add(Threshold(0.5), prob, name="relapse")
    positive = wf.add(Filter(er_positive), te_z, name="er_positive")
    signature = wf.add(Slice(start=(None, len(GSE7390_CLINICAL))), positive, name="signature_genes")
    wf.add(MatMul(), signature, weights, name="risk")
    return wf, inputs
