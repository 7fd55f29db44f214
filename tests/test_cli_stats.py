"""``subzero table`` (and its older name ``catalog``) and ``subzero contaminate``
(subzero/tools/cli/stats.py), through ``subzero.tools.cli.main``."""

from __future__ import annotations

import numpy as np
import pytest
from astropy.io import fits
from astropy.table import Table

import subzero as sz
from subzero import operators as ops
from subzero.tools.cli import main


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli-stats")
    wf = sz.Workflow("objects")
    x = wf.input("x")
    blur = wf.add(ops.Convolve(np.ones((3, 3)) / 9, mode="constant"), x, name="blur")
    wf.add(ops.Label(), wf.add(ops.Threshold(0.5), blur, name="bright"), name="objects")
    image = np.zeros((12, 16))
    image[2:5, 2:6] = 9.5
    image[8:10, 10:14] = 9.5
    image[3, 3] = 70000.0
    wf.run({"x": image}, store=root / "run", executor="local", tile_shape=4)
    flags = np.zeros((12, 16), np.uint8)
    flags[3, 3] = flags[9, 12] = 1
    np.save(root / "flags.npy", flags)
    fits.HDUList([fits.PrimaryHDU(), fits.ImageHDU(flags, name="DQ")]).writeto(root / "dq.fits")
    import zarr

    zarr.create_array(str(root / "flags.zarr"), shape=flags.shape, chunks=(5, 5), dtype=flags.dtype)[:] = flags
    return root, image, flags


def test_table_writes_the_table_the_api_gives(store, capsys):
    root, image, flags = store
    run = sz.open_run(root / "run")
    expected = run.lineage_table("objects", over="x", flags=flags, values="x")
    for out, spec in (("t.ecsv", "flags.npy"), ("t.fits", "dq.fits[DQ]"), ("t.csv", "flags.npy"),
                      ("z.ecsv", "flags.zarr")):
        code = main(["table", str(root / "run"), "--objects", "objects", "--over", "x", "--flags", str(root / spec),
                     "--values", "x", "--out", str(root / out)])
        assert code == 0
        got = Table.read(root / out)
        assert list(got["n_flagged"]) == list(expected["n_flagged"]) == [1, 1]
        np.testing.assert_allclose(got["values_sum"], expected["values_sum"])
    assert "2 object(s), 2 with flagged cells" in capsys.readouterr().out
    from subzero.stats.spec import read_array_spec

    lazy = read_array_spec(run, str(root / "flags.zarr"), "--flags")  # read chunk by chunk, never loaded whole
    assert not isinstance(lazy, np.ndarray) and lazy.shape == flags.shape


def test_table_flags_by_expression_and_answers_to_its_older_name(store, capsys):
    root, image, _ = store
    assert main(["catalog", str(root / "run"), "--objects", "objects", "--over", "x", "--flags", "x>60000",
                 "--out", str(root / "sat.csv")]) == 0
    got = Table.read(root / "sat.csv")
    assert list(got["n_flagged"]) == [1, 0]
    assert main(["table", str(root / "run"), "--objects", "objects", "--over", "x", "--flags",
                 "x>60000 | x<0", "--out", str(root / "sat2.csv")]) == 0
    assert list(Table.read(root / "sat2.csv")["n_flagged"]) == [1, 0]


def test_contaminate_mask_count_and_plot(store, capsys):
    root, image, flags = store
    run = sz.open_run(root / "run")
    assert main(["contaminate", str(root / "run"), "--from", "x", "--flags", str(root / "flags.npy"), "--to", "objects",
                 "--out", str(root / "c.fits")]) == 0
    mask = fits.getdata(root / "c.fits").astype(bool)
    np.testing.assert_array_equal(mask, run.forward_mask("x", np.argwhere(flags), to="objects"))
    assert main(["contaminate", str(root / "run"), "--from", "x", "--flags", str(root / "flags.npy"), "--to", "blur",
                 "--count", "--out", str(root / "n.npy"), "--plot", str(root / "n.png")]) == 0
    counts = np.load(root / "n.npy")
    for cell in np.argwhere(np.ones((12, 16), bool)):
        assert counts[tuple(cell)] == (run.backward_mask("blur", [tuple(cell)], to="x") & (flags > 0)).sum()
    assert (root / "n.png").stat().st_size > 1000
    assert "at most 1 each" in capsys.readouterr().out


def test_contaminate_count_into_a_zarr_array_chunk_by_chunk(store, capsys):
    import zarr

    root, image, flags = store
    run = sz.open_run(root / "run")
    expected = run.contamination_count("x", flags, "objects")
    assert main(["contaminate", str(root / "run"), "--from", "x", "--flags", str(root / "flags.zarr"), "--to",
                 "objects", "--count", "--out", str(root / "n.zarr")]) == 0
    np.testing.assert_array_equal(zarr.open_array(str(root / "n.zarr"), mode="r")[:], expected)
    assert f"{int((expected > 0).sum())} cell(s) of objects depend on them" in capsys.readouterr().out
    assert main(["contaminate", str(root / "run"), "--from", "x", "--flags", "x>60000", "--to", "objects", "--count",
                 "--out", str(root / "n.zarr")]) == 2  # an array there already
    assert "exists already" in capsys.readouterr().err


@pytest.mark.parametrize("args, fragment", [
    (["table", "RUN", "--objects", "blur", "--over", "x", "--out", "OUT/t.ecsv"], "not object labels"),
    (["table", "RUN", "--objects", "nope", "--over", "x", "--out", "OUT/t.ecsv"], "nope"),
    (["table", "RUN", "--objects", "objects", "--over", "x", "--out", "OUT/t.txt"], "ending in .ecsv"),
    (["table", "RUN", "--objects", "objects", "--over", "x", "--flags", "x>>3", "--out", "OUT/t.ecsv"],
     "cannot read"),
    (["table", "RUN", "--objects", "objects", "--over", "x", "--flags", "nothing_here", "--out", "OUT/t.ecsv"],
     "neither a file"),
    (["table", "RUN", "--objects", "objects", "--over", "x", "--flags", "OUT/missing.npy", "--out", "OUT/t.ecsv"],
     "does not exist"),
    (["contaminate", "RUN", "--from", "objects", "--flags", "objects", "--to", "x", "--out", "OUT/c.fits"],
     "not computed from"),
    (["contaminate", "RUN", "--from", "x", "--flags", "x>1", "--to", "objects", "--out", "OUT/c.png"], "ending in"),
])
def test_bad_input_is_one_line_and_exit_2(store, capsys, args, fragment):
    root, _, _ = store
    args = [a.replace("RUN", str(root / "run")).replace("OUT", str(root)) for a in args]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("subzero: error:") and fragment in err and err.count("\n") == 1
