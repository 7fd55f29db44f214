"""check_input_array: numeric arrays pass (native byte order), everything else is one clear WorkflowError."""

from __future__ import annotations

import numpy as np
import pytest

import subzero as sz
from subzero.inputs_check import check_input_array


@pytest.mark.parametrize("value", [np.arange(6).reshape(2, 3), np.ones(3, bool), np.zeros((2, 2), np.float32),
                                   np.array([1 + 2j]), [[1.0, 2.0]], 3.0])
def test_numeric_arrays_pass_unchanged(value):
    got = check_input_array("x", value)
    assert isinstance(got, np.ndarray) and np.array_equal(got, np.asarray(value))


def test_big_endian_data_becomes_native():
    """FITS images are big-endian (>f4): same values, native order."""
    value = np.arange(4, dtype=">f4")
    got = check_input_array("sci", value)
    assert got.dtype == np.float32 and got.dtype.isnative and np.array_equal(got, value)


def test_structured_array_names_its_fields():
    y = np.zeros(3, dtype=[("e.tdm", "?"), ("t.tdm", "<f8")])
    with pytest.raises(sz.WorkflowError, match=r"input 'y' is a structured array with fields 'e.tdm' \(bool\), "
                                               r"'t.tdm' \(float64\); pass one field"):
        check_input_array("y", y)


@pytest.mark.parametrize("value, what", [(np.array(["a", "b"]), "string"), (np.array([object()]), "object"),
                                         (np.array(["2020-01-01"], "datetime64[D]"), "datetime")])
def test_non_numeric_dtypes_are_named(value, what):
    with pytest.raises(sz.WorkflowError, match=rf"input 'x' must be a numeric array .* \({what}\)"):
        check_input_array("x", value)


def test_dataframes_with_numeric_columns_become_float_arrays():
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame({"age": [57, 48], "size": [3.0, np.nan], "er": [True, False]})
    got = check_input_array("x", frame)
    assert got.dtype == np.float64 and got.shape == (2, 3) and np.isnan(got[1, 1]) and got[0, 2] == 1.0
    assert check_input_array("s", frame["age"]).tolist() == [57.0, 48.0]


def test_dataframes_with_text_or_categorical_columns_are_refused():
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame({"age": [57.0, 48.0], "er": pd.Categorical(["negative", "positive"]),
                          "grade": ["poor", "well"]})
    with pytest.raises(sz.WorkflowError, match=r"input 'X' is a DataFrame with non-numeric column\(s\) "
                                               r"'er' \(category\), 'grade' \(.*\); encode them"):
        check_input_array("X", frame)
    with pytest.raises(sz.WorkflowError, match=r"input 'er' is a Series of dtype category"):
        check_input_array("er", frame["er"])


def test_ragged_input_is_a_workflow_error():
    with pytest.raises(sz.WorkflowError, match="input 'x' cannot be read as an array"):
        check_input_array("x", [[1.0], [1.0, 2.0]])
