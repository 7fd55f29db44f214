"""The command line: run, query, explain, demo; input files, pictures, masks, regions, JSON;
user errors are one line and exit code 2, with nothing written."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import subzero as sz
from doc_pages import block, commands, page
from subzero.tools.cli import main, parse_boxes, parse_cells

ROOT = Path(__file__).resolve().parents[1]
fits = pytest.importorskip("astropy.io.fits")


def run_cli(*args: str, cwd: str | Path | None = None):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    return subprocess.run([sys.executable, "-m", "subzero", *args], capture_output=True, text=True, env=env, cwd=cwd)


def one_line_error(done, fragment: str) -> None:
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("subzero: error: "), done.stderr
    assert fragment in done.stderr and "Traceback" not in done.stderr, done.stderr


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli") / "demo"
    assert main(["run", "demo", "--quick", "--store", str(path), "--executor", "local",
                 "--strategy", "crd_a=CompOne,FullMany", "--strategy", "merge=FullOne/forward"]) == 0
    return path


def test_run_then_query_backward_and_forward(store, capsys):
    assert main(["query", str(store), "backward", "blur", "--to", "exposure_a", "--cells", "0,0", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["count"] == 4 and out["cells"] == [[0, 0], [0, 1], [1, 0], [1, 1]]
    assert out["coords"] == "numpy" and out["shape"] == [48, 64]
    assert main(["query", str(store), "forward", "exposure_b", "--to", "merge", "--cells", "3,4;5,6"]) == 0
    assert capsys.readouterr().out.split() == ["3,4", "5,6"]
    assert main(["query", str(store), "forward", "exposure_b", "--to", "merge", "--cells", "3,4", "--cells", "5,6"]) == 0
    assert capsys.readouterr().out.split() == ["3,4", "5,6"]


def test_boxes_and_forced_strategies(store, capsys):
    args = ["query", str(store), "backward", "crd_a", "--to", "exposure_a", "--box", "0:2,0:3", "--json"]
    assert main(args) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main(args + ["--using", "crd_a=FullMany"]) == 0
    assert json.loads(capsys.readouterr().out) == plain
    np.testing.assert_array_equal(parse_cells(None, ["0:2,0:3"]), [[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [1, 2]])


def test_cells_and_boxes_together():
    np.testing.assert_array_equal(parse_cells(["7,7"], ["0:1,0:2"]), [[7, 7], [0, 0], [0, 1]])
    with pytest.raises(sz.LineageError, match="is empty"):
        parse_cells(["7,7"], ["3:3,0:2"])
    with pytest.raises(sz.LineageError, match="same number of coordinates"):
        parse_cells(["7,7,7"], ["0:1,0:2"])


def test_fits_coordinates_in_and_out(store, capsys):
    assert main(["query", str(store), "backward", "blur", "--to", "exposure_a", "--cells", "3,2", "--json"]) == 0
    numpy_order = json.loads(capsys.readouterr().out)
    # the same cell as DS9 sees it: x = col + 1 = 3, y = row + 1 = 4
    assert main(["query", str(store), "backward", "blur", "--to", "exposure_a", "--cells", "3,4", "--fits-coords",
                 "--json"]) == 0
    fits_order = json.loads(capsys.readouterr().out)
    assert fits_order["coords"] == "fits" and fits_order["count"] == numpy_order["count"] == 9
    assert sorted(fits_order["cells"]) == sorted([[c + 1, r + 1] for r, c in numpy_order["cells"]])
    # an inclusive FITS section x 1..2, y 1..3 is the numpy box rows 0:3, cols 0:2
    np.testing.assert_array_equal(parse_cells(None, ["1:2,1:3"], fits=True), parse_cells(None, ["0:3,0:2"]))
    assert parse_boxes(["1:2,1:3"], fits=True) == parse_boxes(["0:3,0:2"]) == [[(0, 3), (0, 2)]]


def test_boxes_go_to_the_query_unexpanded_and_match_their_cells(store, capsys):
    base = ["query", str(store), "backward", "blur", "--to", "exposure_a", "--json"]
    assert main(base + ["--box", "0:3,0:2", "--box", "10:12,5:9"]) == 0
    boxes = json.loads(capsys.readouterr().out)
    cells = ";".join(f"{r},{c}" for r, c in parse_cells(None, ["0:3,0:2", "10:12,5:9"]).tolist())
    assert main(base + ["--cells", cells]) == 0
    assert json.loads(capsys.readouterr().out) == boxes
    done = run_cli(*base[:-1], "--box", "0:49,0:64")
    one_line_error(done, "out of bounds")


def test_explain_shows_strategies_and_costs(store, capsys):
    assert main(["explain", str(store)]) == 0
    text = capsys.readouterr().out
    assert "crd_a (CosmicRayDetect" in text and "CompOne/backward, FullMany/backward" in text
    assert "measured: disk" in text and "total lineage stored" in text


def test_explain_json(store, capsys):
    assert main(["explain", str(store), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    nodes = {n["name"]: n for n in data["nodes"]}
    assert data["workflow"] == "demo" and data["status"] == "done" and data["optimizer"] is None
    assert nodes["exposure_a"]["kind"] == "input" and nodes["exposure_a"]["shape"] == [48, 64]
    assert nodes["crd_a"]["operator"] == "CosmicRayDetect"
    assert nodes["crd_a"]["strategies"] == ["CompOne/backward", "FullMany/backward"]
    assert nodes["blur"]["inputs"] == ["merge"] and nodes["crd_a"]["measured"]["disk_bytes"] > 0
    assert data["total_lineage_bytes"] == sum(n.get("measured", {}).get("disk_bytes", 0) for n in data["nodes"])


@pytest.mark.parametrize("args, fragment", [
    (["query", "/nonexistent/store", "backward", "a", "--to", "b", "--cells", "1,1"], "does not exist"),
    (["run", "no-such-workflow", "--store", "x"], "neither a built-in"),
    (["run", "demo", "--store", "NEW", "--strategy", "crd_a"], "must look like NODE=STRATEGY"),
    (["run", "demo", "--store", "STORE"], "already exists"),
])
def test_user_errors_are_one_line_with_exit_code_2(args, fragment, store, tmp_path):
    args = [str(store) if a == "STORE" else str(tmp_path / "new") if a == "NEW" else a for a in args]
    one_line_error(run_cli(*args), fragment)
    assert not (tmp_path / "new").exists()


def test_bad_cells_from_the_cli(store):
    done = run_cli("query", str(store), "backward", "blur", "--to", "exposure_a", "--cells", "999,0")
    one_line_error(done, "out of bounds")
    done = run_cli("query", str(store), "backward", "blur", "--to", "exposure_a", "--cells", "a,b")
    one_line_error(done, "comma-separated integers")
    done = run_cli("query", str(store), "backward", "blur", "--to", "exposure_a", "--cells", "0,5", "--fits-coords")
    one_line_error(done, "count from 1")


def test_corrupt_store_is_a_clear_error(tmp_path):
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "catalog.json").write_text("{not json")
    one_line_error(run_cli("explain", str(tmp_path / "bad")), "corrupt catalog.json")


def test_workflow_from_a_python_file(tmp_path, capsys):
    script = tmp_path / "flow.py"
    script.write_text(
        "import numpy as np, subzero as sz\n"
        "def build():\n"
        "    wf = sz.Workflow('file')\n"
        "    x = wf.input('x')\n"
        "    wf.add(sz.operators.Transpose(), x, name='t')\n"
        "    return wf, {'x': np.arange(6.).reshape(2, 3)}\n")
    assert main(["run", str(script), "--store", str(tmp_path / "s"), "--executor", "local"]) == 0
    assert main(["query", str(tmp_path / "s"), "backward", "t", "--to", "x", "--cells", "2,1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["cells"] == [[1, 2]]
    # --quick means nothing to this build(): refused, not ignored
    one_line_error(run_cli("run", str(script), "--store", str(tmp_path / "q"), "--executor", "local", "--quick"),
                   "takes no 'quick' parameter")
    assert not (tmp_path / "q").exists()


def test_demo_runs_the_astronomy_workflow_and_prints_both_queries(tmp_path, capsys, store):
    assert main(["demo", "--quick", "--executor", "local", "--store", str(tmp_path / "d")]) == 0
    out = capsys.readouterr().out
    assert "ran the astronomy workflow" in out and "UDF     stars:" in out
    assert "backward: a star of" in out and "forward: cosmic-ray pixel" in out
    assert main(["demo", "--quick", "--executor", "local", "--store", str(tmp_path / "d")]) == 0  # rebuilt
    before = (store / "catalog.json").read_bytes()
    assert main(["demo", "--quick", "--executor", "local", "--store", str(store)]) == 2  # not the demo's
    assert (store / "catalog.json").read_bytes() == before


# -- a scientist's own files ----------------------------------------------------------------------

YOUR_DATA = "guide/your-data.md"  # the walk-through from a FITS file to a traced star


def stars_flow() -> tuple[str, list[str]]:
    """The workflow file (stars.py) of the page "Your own data" and the `subzero run` command in
    its first line."""
    flow = block(YOUR_DATA, "python", "# stars.py: subzero run ")
    return flow, flow.splitlines()[0].removeprefix("# stars.py: ").split()


def exposure(shape=(48, 80), seed=3):
    """A star field: sky, noise and three Gaussian stars; and a dark frame."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:shape[0], 0:shape[1]]
    image = 100 + rng.normal(0, 3, shape)
    for r, c, flux in ((12, 20, 400), (30, 55, 250), (40, 10, 300)):
        image += flux * np.exp(-((yy - r) ** 2 + (xx - c) ** 2) / 4.0)
    return image.astype(np.float32), np.full(shape, 100, dtype=np.float32)


@pytest.fixture(scope="module")
def own_data(tmp_path_factory):
    """A FITS exposure (SCI extension, with WCS), a .npy dark frame, the workflow file, a run."""
    root = tmp_path_factory.mktemp("own")
    image, dark = exposure()
    sci = fits.ImageHDU(image, name="SCI")
    sci.header.update({"OBJECT": "test field", "CTYPE1": "RA---TAN", "CTYPE2": "DEC--TAN", "CRPIX1": 40.0,
                       "CRPIX2": 24.0, "CRVAL1": 150.1, "CRVAL2": 2.2, "CDELT1": -1e-4, "CDELT2": 1e-4})
    fits.HDUList([fits.PrimaryHDU(), sci]).writeto(root / "exposure.fits")
    np.save(root / "dark.npy", dark)
    flow, command = stars_flow()
    (root / "flow.py").write_text(flow)
    (root / "stars.py").write_text(flow)
    assert command[:2] == ["subzero", "run"] and "--param" in command
    done = run_cli(*command[1:], "--executor", "local", "-v", cwd=root)  # the page's command, as written
    assert done.returncode == 0, done.stderr
    (root / "runs" / "stars").rename(root / "run")
    assert "stored in" in done.stdout and "subzero: input raw:" in done.stderr  # -v: diagnostics on stderr
    return root


def test_inputs_from_files_reach_the_workflow(own_data):
    run = sz.open_run(own_data / "run")
    image, dark = exposure()
    np.testing.assert_allclose(np.asarray(run.output("clean")), image - dark)
    labels = np.asarray(run.output("stars"))
    assert len(np.unique(labels[labels > 0])) == 3  # three stars above threshold=50 (given with --param)


def test_query_writes_mask_regions_and_plot(own_data, capsys):
    run = sz.open_run(own_data / "run")
    labels = np.asarray(run.output("stars"))
    star = np.argwhere(labels == labels[12, 20])  # the brightest star's pixels
    expected = run.backward_mask("stars", star, to="raw")
    cells = ";".join(f"{r},{c}" for r, c in star)
    out = own_data / "out"
    out.mkdir()
    assert main(["query", str(own_data / "run"), "backward", "stars", "--to", "raw", "--cells", cells,
                 "--mask", str(out / "star.npy"), "--regions", str(out / "star.reg"),
                 "--plot", str(out / "star.png")]) == 0
    summary = capsys.readouterr().out
    assert summary.startswith(f"backward stars -> raw: {int(expected.sum())} cell(s); wrote ")
    np.testing.assert_array_equal(np.load(out / "star.npy"), expected)  # exactly the traced cells

    from regions import Regions

    cover = np.zeros(expected.shape, dtype=bool)
    for region in Regions.read(str(out / "star.reg"), format="ds9"):
        cover |= region.to_mask(mode="center").to_image(expected.shape).astype(bool)
    np.testing.assert_array_equal(cover, expected)

    from matplotlib.image import imread

    pixels = imread(str(out / "star.png"))[..., :3]
    height, width = pixels.shape[:2]
    assert width > 1.5 * height  # both ends, side by side, each a cutout around its cells
    magenta = (pixels[..., 0] > pixels[..., 1] + 0.25) & (pixels[..., 2] > pixels[..., 1] + 0.25)
    assert np.count_nonzero(magenta) > 500  # the backward lineage in its colour


def test_fits_mask_of_a_query(own_data, capsys):
    out = own_data / "fitsmask"
    out.mkdir()
    assert main(["query", str(own_data / "run"), "forward", "raw", "--to", "smooth", "--cells", "20,12",
                 "--fits-coords", "--mask", str(out / "m.fits"), "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    data = fits.getdata(out / "m.fits")
    assert data.dtype == np.uint8 and int(data.sum()) == answer["count"]
    assert sorted(answer["cells"]) == sorted((np.argwhere(data)[:, ::-1] + 1).tolist())
    assert answer["written"] == [str(out / "m.fits")]
    assert main(["query", str(own_data / "run"), "backward", "smooth", "--to", "raw", "--cells", "20,12",
                 "--mask", str(out / "back.fits")]) == 0
    header = fits.getheader(out / "back.fits")  # the exposure's own header, kept in the store by `run`
    assert header["OBJECT"] == "test field" and header["CTYPE1"] == "RA---TAN" and header["CRVAL1"] == 150.1


@pytest.mark.parametrize("extra, fragment", [
    (["--input", "raw=missing.fits"], "input file 'missing.fits' does not exist"),
    (["--input", "raw=exposure.fits[3]"], "has no extension [3]; it has: [0] PRIMARY PrimaryHDU; [1] SCI"),
    (["--input", "raw=exposure.fits[0]"], "[0] holds no image"),
    (["--input", "raw=exposure.fits", "--input", "flat=dark.npy"], "workflow 'stars' has no input 'flat'"),
    (["--input", "raw=exposure.fits"], "needs input 'dark': give --input dark=PATH"),
    (["--input", "raw=exposure.fits", "--input", "dark=dark.npy", "--param", "treshold=3"],
     "unknown --param 'treshold'"),
    (["--input", "raw=exposure.fits", "--input", "dark=dark.npy", "--param", "threshold=wide"], "expects float"),
    (["--input", "raw=dark.txt"], "unknown format '.txt'"),
])
def test_bad_inputs_are_one_line_and_write_nothing(own_data, extra, fragment):
    (own_data / "dark.txt").write_text("0")
    done = run_cli("run", "flow.py", "--store", "fresh", "--executor", "local", *extra, cwd=own_data)
    one_line_error(done, fragment)
    assert not (own_data / "fresh").exists()


def test_a_shape_mismatch_is_refused_before_the_store_exists(own_data):
    """A 50x50 dark against a 48x80 exposure: one line, nothing stored, and the corrected run
    into the same --store then works (no failed store asking for --resume)."""
    np.save(own_data / "dark_small.npy", np.zeros((50, 50), np.float32))
    args = ["run", "flow.py", "--store", "shapes", "--executor", "local", "--input", "raw=exposure.fits"]
    done = run_cli(*args, "--input", "dark=dark_small.npy", cwd=own_data)
    one_line_error(done, "node 'clean' (Subtract): Subtract: input shapes [(48, 80), (50, 50)] do not broadcast")
    assert "nothing was stored" in done.stderr and "--resume" not in done.stderr
    assert not (own_data / "shapes").exists()
    done = run_cli(*args, "--input", "dark=dark.npy", cwd=own_data)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("source, fragment", [
    ("import subzero as sz\n\ndef build(inputs):\n    x = = 1\n", "broken.py:4: SyntaxError: invalid syntax"),
    ("import subzero as sz\nimport no_such_module_here\n",
     "broken.py:2: ModuleNotFoundError: No module named 'no_such_module_here'"),
    ("import subzero as sz\n\nLIMIT = 1 / 0\n", "broken.py:3: ZeroDivisionError: division by zero"),
])
def test_a_broken_workflow_file_is_one_line_with_its_line(tmp_path, monkeypatch, capsys, source, fragment):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "broken.py").write_text(source)
    assert main(["run", "broken.py", "--store", "s", "--executor", "local"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("subzero: error: ") and fragment in err, err
    assert not (tmp_path / "s").exists()
    assert main(["run", "broken.py", "--store", "s", "--executor", "local", "-v"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and fragment in err


def test_modules_in_the_working_directory_cannot_replace_python_s(own_data, tmp_path):
    """``python -m subzero`` puts the working directory on sys.path: a profile.py or types.py
    there must not replace the modules subzero, numpy or pyspark import."""
    for name in ("profile", "types", "inspect", "cProfile"):
        (tmp_path / f"{name}.py").write_text("raise SystemExit('the working directory shadowed a module')\n")
    for name in ("exposure.fits", "dark.npy"):
        (tmp_path / name).write_bytes((own_data / name).read_bytes())
    # the workflow's own helper module beside it still imports
    (tmp_path / "helpers.py").write_text("THRESHOLD_NAME = 'threshold'\n")
    (tmp_path / "flow.py").write_text("import helpers\n" + (own_data / "flow.py").read_text())
    done = run_cli("run", "flow.py", "--store", "s", "--executor", "local", "--input", "raw=exposure.fits",
                   "--input", "dark=dark.npy", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert run_cli("info", "s", cwd=tmp_path).returncode == 0


@pytest.mark.parametrize("extra, fragment", [
    (["--plot", "x.gif"], "--plot 'x.gif': give a file ending in .png, .pdf, .svg"),
    (["--mask", "x.csv"], "--mask 'x.csv': give a file ending in .npy"),
    (["--regions", "nodir/x.reg"], "directory 'nodir' does not exist"),
])
def test_bad_outputs_are_refused_before_the_query(own_data, extra, fragment):
    before = sorted(p.name for p in own_data.iterdir())
    done = run_cli("query", "run", "backward", "stars", "--to", "raw", "--cells", "12,20", *extra, cwd=own_data)
    one_line_error(done, fragment)
    assert sorted(p.name for p in own_data.iterdir()) == before


def test_plot_and_regions_of_arrays_that_are_not_2d(store, tmp_path, capsys):
    # column_total is 1-D: regions are refused; a plot draws the 2-D end only
    done = run_cli("query", str(store), "backward", "column_total", "--to", "exposure_a", "--cells", "3",
                   "--regions", str(tmp_path / "x.reg"))
    assert done.returncode == 0 and (tmp_path / "x.reg").exists()  # exposure_a is 2-D
    done = run_cli("query", str(store), "forward", "exposure_a", "--to", "column_total", "--cells", "3,3",
                   "--regions", str(tmp_path / "y.reg"))
    one_line_error(done, "DS9 regions are for 2-D images")
    assert main(["query", str(store), "backward", "column_total", "--to", "exposure_a", "--cells", "3",
                 "--plot", str(tmp_path / "p.png")]) == 0
    assert "column_total has shape (64,), not 2-D: not drawn" in capsys.readouterr().err
    from matplotlib.image import imread

    height, width = imread(str(tmp_path / "p.png")).shape[:2]
    assert width < 1.6 * height  # only exposure_a: one panel
    done = run_cli("query", str(store), "forward", "column_total", "--to", "column_total", "--cells", "3",
                   "--plot", str(tmp_path / "q.png"))
    one_line_error(done, "--plot draws 2-D arrays")
    assert not (tmp_path / "q.png").exists() and not (tmp_path / "y.reg").exists()


# -- the command itself ---------------------------------------------------------------------------

def test_version_and_python_dash_m():
    done = run_cli("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"subzero {sz.__version__}"
    done = run_cli("query", "--help")
    assert done.returncode == 0 and "--fits-coords" in done.stdout and "R,C[;R,C...]" in done.stdout


def test_quiet_and_verbose(tmp_path, capsys):
    script = tmp_path / "flow.py"
    script.write_text("import numpy as np, subzero as sz\n"
                      "def build(inputs):\n"
                      "    wf = sz.Workflow('v')\n"
                      "    wf.add(sz.operators.Transpose(), wf.input('x'), name='t')\n"
                      "    return wf\n")
    np.save(tmp_path / "x.npy", np.ones((2, 3)))
    assert main(["-v", "run", str(script), "--input", f"x={tmp_path / 'x.npy'}", "--store", str(tmp_path / "a"),
                 "--executor", "local"]) == 0
    captured = capsys.readouterr()
    assert "subzero: running workflow 'v': 2 node(s)" in captured.err
    assert "stored in" in captured.out and "subzero:" not in captured.out
    assert main(["run", str(script), "--input", f"x={tmp_path / 'x.npy'}", "--store", str(tmp_path / "b"),
                 "--executor", "local", "-q"]) == 0
    assert capsys.readouterr().err == ""


def test_import_subzero_is_light():
    code = ("import sys, subzero, subzero.tools.cli\n"
            "heavy = ('numpy', 'scipy', 'pyspark', 'matplotlib', 'astropy', 'regions', 'rich', 'zarr', 'lmdb')\n"
            "print([m for m in sys.modules if m.split('.')[0] in heavy or m.startswith('subzero.operators.')])\n"
            "from subzero.operators import Transpose\n"
            "import subzero as sz\n"
            "assert sz.operators.Add and sz.Workflow and 'Workflow' in dir(sz) and 'Label' in dir(sz.operators)\n"
            "print(sorted(m for m in sys.modules if m.startswith('subzero.operators.')))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.splitlines()
    assert first == "[]"
    assert "subzero.operators.shape" in second and "subzero.operators.value" not in second


def test_a_local_run_and_a_query_import_no_plotting_astronomy_or_spark(tmp_path):
    script = tmp_path / "flow.py"
    script.write_text("import numpy as np, subzero as sz\n"
                      "def build():\n"
                      "    wf = sz.Workflow('q')\n"
                      "    wf.add(sz.operators.Transpose(), wf.input('x'), name='t')\n"
                      "    return wf, {'x': np.ones((2, 3))}\n")
    heavy = "('scipy', 'pyspark', 'matplotlib', 'astropy', 'regions', 'rich')"  # zarr: the store's arrays
    for code in (f"main(['run', {str(script)!r}, '--store', {str(tmp_path / 's')!r}, '--executor', 'local', '-q'])",
                 f"main(['query', {str(tmp_path / 's')!r}, 'backward', 't', '--to', 'x', '--cells', '1,1'])"):
        done = subprocess.run([sys.executable, "-c",
                               f"import sys\nfrom subzero.tools.cli import main\nassert {code} == 0\n"
                               f"print([m for m in sys.modules if m.split('.')[0] in {heavy}])\n"],
                              capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines()[-1] == "[]"
    assert done.stdout.splitlines() == ["1,1", "[]"]


def test_a_cold_query_of_a_local_store_imports_only_what_the_answer_needs(store):
    """A query of a local directory reads it with `os`: no fsspec (nor asyncio or ssl with it),
    no zarr, Spark, plotting or astronomy; rtree loads only when an R-tree is opened."""
    heavy = ("fsspec", "zarr", "asyncio", "ssl", "pyspark", "matplotlib", "astropy", "scipy", "pulp")
    queries = {  # through stored shards (FullMany R-trees, FullOne) and by mapping functions only
        "shards": ["backward", "crd_a", "--to", "exposure_a", "--cells", "3,4", "--using", "crd_a=FullMany/backward"],
        "forward": ["forward", "exposure_a", "--to", "merge", "--cells", "3,4", "--using", "merge=FullOne/forward"],
        "mapped": ["backward", "column_total", "--to", "merge", "--cells", "3"],
    }
    loaded = {}
    for name, args in queries.items():
        code = ("import sys, io, contextlib\nfrom subzero.tools.cli import main\n"
                f"with contextlib.redirect_stdout(io.StringIO()):\n    assert main(['query', {str(store)!r}, *{args!r}]) == 0\n"
                "print(sorted({m.split('.')[0] for m in sys.modules}))\n")
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env=dict(os.environ, PYTHONPATH=str(ROOT)))
        assert done.returncode == 0, done.stderr
        loaded[name] = set(json.loads(done.stdout.splitlines()[-1].replace("'", '"')))
        assert not loaded[name] & set(heavy), (name, sorted(loaded[name] & set(heavy)))
    assert "rtree" in loaded["shards"] and "rtree" not in loaded["mapped"]


def test_a_query_through_stencils_imports_no_scipy(own_data):
    """Operators import scipy on first use: a query answered by mapping functions never does."""
    code = ("import sys\nfrom subzero.tools.cli import main\n"
            f"assert main(['query', {str(own_data / 'run')!r}, 'backward', 'smooth', '--to', 'raw', '--cells', '3,4',"
            " '--json']) == 0\n"
            "print([m for m in sys.modules if m.split('.')[0] in ('scipy', 'pyspark', 'matplotlib', 'astropy')])\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[0])["count"] > 1 and done.stdout.splitlines()[-1] == "[]"


def test_the_operator_example_runs_after_the_quick_start(tmp_path):
    """The example of "Writing an operator" (docs/guide/operators.md), next to the demo's store."""
    example = block("guide/operators.md", "python", "import numpy as np\nimport subzero as sz\n\nclass Transpose")
    assert 'store="runs/demo"' not in example  # the demo's own store: taken after the quick start
    (tmp_path / "runs" / "demo").mkdir(parents=True)
    (tmp_path / "runs" / "demo" / "catalog.json").write_text("{}")  # as left by `subzero demo`
    # in-process here (executor="local" records exactly the lineage Spark does), to keep the test fast
    assert 'store="runs/example")' in example, example
    example = example.replace('store="runs/example")', 'store="runs/example", executor="local")')
    example += ("assert run.backward(t, [(1, 2)], to=x).tolist() == [[2, 1]]\n"
                "assert run.backward_mask(t, [(1, 2)], to=x).sum() == 1 and run.output(t).shape == (4, 3)\n")
    done = subprocess.run([sys.executable, "-c", example], capture_output=True, text=True, cwd=tmp_path,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert done.returncode == 0, done.stderr


def test_the_command_line_page_documents_the_command_line():
    """docs/guide/cli.md names every flag; the Python side of queries is on docs/guide/queries.md."""
    cli = page("guide/cli.md")
    for flag in ("--input NAME=PATH", "--param KEY=VALUE", "--cells R,C[;R,C...]", "--plot", "--mask", "--regions",
                 "--fits-coords", "--json", "python -m subzero", "--version", "-v", "--quiet"):
        assert flag in cli, flag
    assert "--cells R,C ..." not in cli
    queries = page("guide/queries.md")
    for method in ("backward_mask", "forward_mask", "run.output"):
        assert method in queries, method


def test_a_fits_mask_carries_the_header_kept_with_the_node(tmp_path):
    """The header of an input read from FITS, kept in its catalog record's metadata, is written
    back with a FITS mask of that node (the WCS comes along)."""
    from types import SimpleNamespace

    from subzero.tools.export import write_mask
    from subzero.input_files import header_to_text
    from subzero.input_files import node_fits_header as _fits_header

    header = fits.Header({"OBJECT": "M31", "CTYPE1": "RA---TAN", "CRPIX1": 3.0})
    records = {"raw": SimpleNamespace(metadata={"fits_header": header_to_text(header)}),
               "dark": SimpleNamespace(metadata={})}
    run = SimpleNamespace(catalog=SimpleNamespace(nodes=records), node=lambda ref: SimpleNamespace(name=ref))
    assert _fits_header(run, "dark") is None and _fits_header(run, "missing") is None
    write_mask(tmp_path / "m.fits", np.eye(3, dtype=bool), _fits_header(run, "raw"))
    written = fits.getheader(tmp_path / "m.fits")
    assert written["OBJECT"] == "M31" and written["CTYPE1"] == "RA---TAN" and written["CRPIX1"] == 3.0


def test_spark_keeps_its_log_out_of_the_terminal(tmp_path):
    """A failing operator on Spark: the Python error in one line, none of log4j's ~200 lines."""
    script = tmp_path / "fail.py"
    script.write_text("import numpy as np, subzero as sz\n"
                      "class Boom(sz.operators.Transpose):\n"
                      "    def run(self, ctx, x):\n"
                      "        raise ValueError('bad pixel at 3,4')\n"
                      "def build():\n"
                      "    wf = sz.Workflow('fail')\n"
                      "    wf.add(Boom(), wf.input('x'), name='boom')\n"
                      "    return wf, {'x': np.ones((2, 3))}\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_SUBMIT_ARGS", "PYSPARK_GATEWAY_PORT")}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([sys.executable, "-m", "subzero", "run", str(script), "--store", str(tmp_path / "s"),
                           "--master", "local[1]"], capture_output=True, text=True, env=env)
    assert done.returncode == 2
    # the JVM's own warnings ("Using incubator modules") go to the driver log, not the terminal
    assert done.stderr.splitlines() == ["subzero: error: node 'boom' failed on Spark: ValueError: bad pixel at 3,4"], \
        done.stderr


def test_docstring_examples():
    import doctest
    import importlib
    import pkgutil

    import subzero.tools.cli

    names = ["subzero.tools.cli"] + [f"subzero.tools.cli.{m.name}"
                                     for m in pkgutil.iter_modules(subzero.tools.cli.__path__)]
    assert {"subzero.tools.cli.cells", "subzero.tools.cli.query", "subzero.tools.cli.common"} <= set(names)
    attempted = 0
    for name in names:
        result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
        assert result.failed == 0, name
        attempted += result.attempted
    assert attempted >= 5  # parse_boxes, parse_cells, _attach_negative_values


# -- resume, overwrite, the demo's own store --------------------------------------------------------------------

FLAKY_FLOW = """
import os
import numpy as np
import subzero as sz
from subzero import operators as ops


class Flaky(ops.GaussianFilter):
    def run(self, ctx, x):
        if os.environ.get("SUBZERO_TEST_FAIL") and ctx.tile_box[0][0] > 0:
            raise ArithmeticError("sensor overflow")
        return super().run(ctx, x)


def build():
    wf = sz.Workflow("flaky")
    b = wf.add(ops.GaussianFilter(1.0), wf.input("x"), name="blur")
    wf.add(ops.Label(), wf.add(ops.Threshold(0.5), wf.add(Flaky(1.0), b, name="flaky"), name="bright"),
           name="stars")
    return wf, {"x": np.random.default_rng(0).random((40, 48))}
"""


def test_run_resume_and_overwrite(tmp_path, monkeypatch, capsys):
    (tmp_path / "flow.py").write_text(FLAKY_FLOW)
    base = ["run", str(tmp_path / "flow.py"), "--executor", "local", "--tile", "16", "--strategy", "stars=FullMany"]
    assert main([*base, "--store", str(tmp_path / "clean")]) == 0
    monkeypatch.setenv("SUBZERO_TEST_FAIL", "1")
    assert main([*base, "--store", str(tmp_path / "s")]) == 2
    assert "sensor overflow" in capsys.readouterr().err
    monkeypatch.delenv("SUBZERO_TEST_FAIL")
    assert main([*base, "--store", str(tmp_path / "s")]) == 2
    assert "--resume" in capsys.readouterr().err  # the failed run's store says how to go on
    assert main([*base, "--store", str(tmp_path / "s"), "--resume"]) == 0
    assert "stored in" in capsys.readouterr().out
    run, clean = sz.open_run(tmp_path / "s"), sz.open_run(tmp_path / "clean")
    assert len(run.catalog.resumed) == 1
    for node in ("blur", "flaky", "stars"):
        np.testing.assert_array_equal(np.asarray(run.output(node)), np.asarray(clean.output(node)))
    assert np.array_equal(run.backward("stars", [(20, 20)], to="x"), clean.backward("stars", [(20, 20)], to="x"))
    done = run_cli("run", str(tmp_path / "flow.py"), "--executor", "local", "--store", str(tmp_path / "s"),
                   "--resume", "--tile", "8")
    one_line_error(done, "this run differs from the stored one in the run's settings")
    assert main([*base, "--store", str(tmp_path / "s"), "--overwrite", "--strategy", "bright=FullOne"]) == 0
    assert sz.open_run(tmp_path / "s").strategies["bright"] == ("FullOne/backward",)
    (tmp_path / "theirs").mkdir()
    (tmp_path / "theirs" / "thesis.tex").write_text("mine")
    one_line_error(run_cli(*base[:2], "--executor", "local", "--store", str(tmp_path / "theirs"), "--overwrite"),
                   "was not made by subzero")
    assert (tmp_path / "theirs" / "thesis.tex").read_text() == "mine"


def test_demo_rebuilds_its_own_store_after_a_crash(tmp_path, capsys):
    from subzero.catalog import RunRecord
    from subzero.tools.cli.demo import DEMO, _made_by_demo
    from subzero.store import FileStore

    killed = tmp_path / "demo"
    store = FileStore.create(killed, RunRecord(workflow={"name": "astronomy", "nodes": []}, created="now",
                                               executor="local"), made_by=DEMO)
    store.close()
    (killed / "arrays" / "half").mkdir()
    (killed / ".writer").write_text('{"pid": 999999, "host": "%s", "started": "x"}' % __import__("socket").gethostname())
    assert _made_by_demo(killed)
    (tmp_path / "begun").mkdir()
    (tmp_path / "begun" / ".writer").write_text("")  # killed as it took the store
    assert _made_by_demo(tmp_path / "begun")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "catalog.json").write_text("{}")
    assert not _made_by_demo(tmp_path / "other") and not _made_by_demo(tmp_path / "missing")
    assert main(["demo", "--quick", "--executor", "local", "--store", str(killed)]) == 0
    assert "backward: a star of" in capsys.readouterr().out
    assert sz.open_run(killed).catalog.status == "done" and FileStore.made_by(killed) == DEMO


# -- brush, replay, info, partial stores -------------------------------------------------------------

def test_brush_from_the_command_line(own_data, capsys):
    run = sz.open_run(own_data / "run")
    out = own_data / "brushed"
    out.mkdir()
    assert main(["brush", str(own_data / "run"), "stars", "--box", "10:15,18:23", "--to", "raw", "--json",
                 "--plot", str(out / "b.png"), "--mask", str(out / "b.npy")]) == 0
    data = json.loads(capsys.readouterr().out)
    traced = run.backward_mask("stars", box=[(10, 15), (18, 23)], to="raw")
    assert data["traced"]["count"] == int(traced.sum()) and data["brushed"]["count"] == 25
    np.testing.assert_array_equal(np.load(out / "b.npy"), traced)  # exactly the traced cells
    linked = run.forward_mask("raw", traced, to="stars")
    assert list(data["outputs"]) == ["stars"] and data["outputs"]["stars"]["count"] == int(linked.sum())
    cover = np.zeros(linked.shape, bool)
    for (r0, r1), (c0, c1) in data["outputs"]["stars"]["boxes"]:
        cover[r0:r1, c0:c1] = True
    np.testing.assert_array_equal(cover, linked)
    from matplotlib.image import imread

    height, width = imread(str(out / "b.png")).shape[:2]
    assert width > 2.2 * height  # three panels side by side
    assert main(["brush", str(own_data / "run"), "stars", "--cells", "21,13", "--fits-coords", "--to", "raw"]) == 0
    text = capsys.readouterr().out.splitlines()
    assert text[0].startswith("brushed stars: 1 cell(s) in [21:21,13:13]") and text[1].startswith("  <- raw: ")
    assert text[2].startswith("  -> stars: ") and text[3].startswith("in ") and "backward" in text[3]
    one_line_error(run_cli("brush", "run", "stars", "--cells", "12,20", cwd=own_data), "inputs raw, dark; say which")


def test_replay_from_the_command_line(own_data, capsys):
    run = sz.open_run(own_data / "run")
    labels = np.asarray(run.output("stars"))
    assert main(["replay", str(own_data / "run"), "--from", "stars", "--cells", "12,20", "--to", "raw", "--set", "100",
                 "--store", str(own_data / "what-if"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    traced = run.backward_mask("stars", [(12, 20)], to="raw")
    assert data["inputs"] == {"raw": {"replaced": int(traced.sum()), "changed": int(traced.sum())}}
    new = sz.open_run(own_data / "what-if")
    raw = np.asarray(new.output("raw"))
    assert np.all(raw[traced] == 100) and np.array_equal(raw[~traced], np.asarray(run.output("raw"))[~traced])
    changed = np.asarray(new.output("stars")) != labels
    assert data["outputs"]["stars"]["count"] == int(changed.sum()) > 0
    assert data["outputs"]["stars"]["within_lineage"] is True
    assert not np.any(np.asarray(new.output("stars"))[labels == labels[12, 20]])  # the star is gone
    nodes = {n["name"]: n for n in data["nodes"]}
    assert nodes["dark"]["how"] == "linked" and nodes["stars"]["how"] == "whole" and nodes["clean"]["rerun"] >= 1
    assert new.catalog.replayed_from["store"] == str(own_data / "run")
    # a whole replacement file: only the cells that differ count
    fixed = np.array(run.output("raw"))
    fixed[0:2, 0:3] = 0
    np.save(own_data / "fixed.npy", fixed)
    assert main(["replay", str(own_data / "run"), "--input", f"raw={own_data / 'fixed.npy'}", "--store",
                 str(own_data / "fixed")]) == 0
    text = capsys.readouterr().out
    assert f"  raw: {fixed.size} cell(s) replaced, 6 changed (1 of 1 chunk(s) written)" in text
    assert "within the forward lineage" in text
    assert "unchanged, linked from the old store: dark" in text


@pytest.mark.parametrize("extra, fragment", [
    (["--set", "100"], "--cells/--box/--set need --from NODE"),
    (["--from", "stars", "--to", "raw", "--set", "1"], "give its cells with --cells or --box"),
    (["--from", "stars", "--cells", "12,20", "--to", "raw"], "give the new values: --set VALUE"),
    (["--from", "stars", "--cells", "12,20", "--to", "raw", "--set", "lots"], "--set 'lots' must be a number"),
    (["--from", "stars", "--cells", "12,20", "--set", "1"], "computed from inputs raw, dark"),
    (["--from", "raw", "--cells", "99,0", "--set", "1"], "out of bounds"),
    (["--input", "flat=dark.npy"], "'flat'"),
    (["--input", "raw=missing.npy"], "does not exist"),
    (["--from", "stars", "--cells", "12,20", "--to", "raw", "--input", "dark=dark.npy"], "give --input raw=PATH"),
])
def test_bad_replays_are_one_line_and_write_nothing(own_data, extra, fragment):
    done = run_cli("replay", "run", "--store", "never", *extra, cwd=own_data)
    one_line_error(done, fragment)
    assert not (own_data / "never").exists()


def test_info_from_the_command_line(own_data, capsys):
    assert main(["info", str(own_data / "run")]) == 0
    text = capsys.readouterr().out
    assert "workflow 'stars', status done" in text and "inputs: raw, dark; outputs: stars" in text
    assert "float32 +FITS header" in text and "Label" in text and "48x80" in text
    assert main(["info", str(own_data / "run"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    nodes = {n["name"]: n for n in data["nodes"]}
    assert nodes["raw"]["metadata"] == ["fits_header"] and nodes["stars"]["operator"] == "Label"
    assert nodes["stars"]["shape"] == [48, 80] and nodes["stars"]["dtype"] == "int64"


def test_explain_and_info_of_a_failed_run(tmp_path):
    script = tmp_path / "half.py"
    script.write_text("import numpy as np, subzero as sz\n"
                      "class Boom(sz.operators.Transpose):\n"
                      "    def run(self, ctx, x):\n"
                      "        raise ValueError('no calibration for this chip')\n"
                      "def build():\n"
                      "    wf = sz.Workflow('half')\n"
                      "    t = wf.add(sz.operators.Transpose(), wf.input('x'), name='t')\n"
                      "    wf.add(Boom(), t, name='boom')\n"
                      "    return wf, {'x': np.ones((2, 3))}\n")
    done = run_cli("run", str(script), "--store", str(tmp_path / "s"), "--executor", "local")
    one_line_error(done, "no calibration for this chip")
    done = run_cli("explain", str(tmp_path / "s"))
    assert done.returncode == 0, done.stderr
    assert "status failed: 2 of 3 nodes committed (x, t); not committed: boom" in done.stdout
    assert "boom (Boom): not committed" in done.stdout and "t (Transpose, shape (3, 2))" in done.stdout
    done = run_cli("info", str(tmp_path / "s"), "--json")
    assert json.loads(done.stdout)["committed"] == ["x", "t"]
    one_line_error(run_cli("query", str(tmp_path / "s"), "backward", "t", "--to", "x", "--cells", "0,0"),
                   "did not finish (status 'failed')")


# -- the page "Your own data": a FITS file to a traced star, every command as written -------------

def as_argv(line: str) -> list[str]:
    import shlex

    argv = shlex.split(line)
    assert argv[0] == "subzero", line
    return [sys.executable, "-m", "subzero", *argv[1:]]


@pytest.mark.slow  # five commands in new processes, the run on Spark: about 45 s
def test_the_your_data_walkthrough_runs_as_written(tmp_path):
    image, dark = exposure()
    sci = fits.ImageHDU(image, name="SCI")
    sci.header.update({"OBJECT": "test field", "CTYPE1": "RA---TAN", "CTYPE2": "DEC--TAN", "CRVAL1": 150.1})
    fits.HDUList([fits.PrimaryHDU(), sci]).writeto(tmp_path / "exposure.fits")
    np.save(tmp_path / "dark.npy", dark)
    flow, _ = stars_flow()
    (tmp_path / "stars.py").write_text(flow)
    lines = commands(page(YOUR_DATA))
    assert [c.split()[1] for c in lines] == ["run", "info", "query", "brush", "replay"]
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_SUBMIT_ARGS", "PYSPARK_GATEWAY_PORT")}
    env["PYTHONPATH"] = str(ROOT)
    env["SUBZERO_IN_PROCESS_BYTES"] = "0"  # small inputs: they would run in-process, this checks Spark
    outs = []
    for line in lines:  # the run goes on the embedded Spark session, as the page says
        done = subprocess.run(as_argv(line), capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)
        assert done.returncode == 0, (line, done.stderr[-2000:])
        outs.append(done.stdout)
    run = sz.open_run(tmp_path / "runs" / "stars")
    assert run.catalog.executor == "spark" and run.catalog.master.startswith("local[")
    assert "stars" in outs[1] and "Label" in outs[1] and "status done" in outs[1]
    traced = run.backward_mask("stars", [(12, 20)], to="raw")  # DS9's x = 21, y = 13
    labels = np.asarray(run.output("stars"))
    star = labels == labels[12, 20]
    assert traced.sum() > star.sum() > 1 and traced[star].all()  # the whole star, and the smoothing around it
    mask = fits.getdata(tmp_path / "star.fits")
    np.testing.assert_array_equal(mask.astype(bool), traced)  # exactly the traced cells
    assert fits.getheader(tmp_path / "star.fits")["OBJECT"] == "test field"
    from regions import Regions

    cover = np.zeros(traced.shape, dtype=bool)
    for region in Regions.read(str(tmp_path / "star.reg"), format="ds9"):
        cover |= region.to_mask(mode="center").to_image(traced.shape).astype(bool)
    np.testing.assert_array_equal(cover, traced)
    from matplotlib.image import imread

    for name, panels in (("star.png", 2), ("brush.png", 3)):
        height, width = imread(str(tmp_path / name)).shape[:2]
        assert width > (panels - 0.8) * height, name  # the panels side by side
    assert "-> stars: " in outs[3]
    after = np.asarray(sz.open_run(tmp_path / "runs" / "no-star").output("stars"))
    assert not after[star].any() and "within the forward lineage" in outs[4]


def test_sky_positions_and_fk5_regions(own_data, capsys, tmp_path):
    from astropy.wcs import WCS
    from regions import Regions

    run = sz.open_run(own_data / "run")
    header = fits.getheader(own_data / "exposure.fits", "SCI")
    wcs = WCS(header).celestial
    sky = wcs.pixel_to_world(20, 12)  # numpy cell (12, 20): the brightest star
    text = sky.to_string("hmsdms", sep=":", precision=4)
    assert main(["query", str(own_data / "run"), "backward", "stars", "--to", "raw", "--sky", text, "--json",
                 "--regions", str(tmp_path / "sky.reg"), "--regions-frame", "fk5"]) == 0
    data = json.loads(capsys.readouterr().out)
    expected = run.backward("stars", [(12, 20)], to="raw")
    assert data["cells"] == expected.tolist()
    assert "\nfk5\n" in (tmp_path / "sky.reg").read_text()
    cover = np.zeros(run.shape("raw"), bool)
    for region in Regions.read(str(tmp_path / "sky.reg"), format="ds9"):
        cover |= region.to_pixel(wcs).to_mask(mode="center").to_image(cover.shape).astype(bool)
    np.testing.assert_array_equal(cover, run.backward_mask("stars", [(12, 20)], to="raw"))
    degrees = f"{sky.ra.deg} {sky.dec.deg}"
    assert main(["query", str(own_data / "run"), "backward", "stars", "--to", "raw", "--sky", degrees, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["cells"] == expected.tolist()
    for argv, message in ((["--sky", "150.1"], "give 'RA DEC'"), (["--sky", "150.2 2.2"], "outside the array"), (["--sky", "10 -50"], "does not project"),
                          (["--cells", "1,1", "--regions", str(tmp_path / "d.reg"), "--regions-frame", "fk5",
                            "--to", "dark"], "'dark' has no WCS")):
        to = [] if "--to" in argv else ["--to", "raw"]
        done = run_cli("query", str(own_data / "run"), "backward", "stars", *to, *argv)
        one_line_error(done, message)


def test_every_benchmark_is_a_bench_choice():
    """`subzero bench NAME` offers exactly the benchmarks the bench package runs, and the Command
    line page lists each."""
    from subzero_bench import BENCHES, COMMANDS

    from subzero.tools.cli import build_parser
    from subzero.tools.cli.bench import NAMES

    assert set(NAMES) == set(COMMANDS) and set(BENCHES) <= set(COMMANDS)
    parser = build_parser()
    for name in COMMANDS:
        assert parser.parse_args(["bench", name]).name == name


def test_bench_without_the_benchmarks_installed_says_what_to_install(monkeypatch, capsys):
    """The benchmarks are a distribution of their own: `subzero bench` without it is one line
    naming what to install, exit 2; the core imports no benchmark code otherwise."""
    monkeypatch.setitem(sys.modules, "subzero_bench", None)  # import subzero_bench: ModuleNotFoundError
    assert main(["bench", "micro", "--quick"]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [err.strip()] and "pip install -e ./benchmarks" in err, err


def test_the_subzero_package_ships_no_benchmark_code():
    import subzero

    package = Path(subzero.__file__).parent
    assert not (package / "bench").exists()
    assert not [p for p in package.rglob("*.py") if "subzero_bench" in p.read_text() and p.name != "bench.py"]


def test_the_command_line_page_lists_every_benchmark():
    from subzero_bench import BENCHES

    usage = re.search(r"^subzero bench (\S+)", page("guide/cli.md"), re.M)
    assert usage and set(BENCHES) <= set(usage.group(1).split("|")), usage


def test_bench_shape_is_checked_before_any_benchmark_runs(capsys):
    """``--shape HxW`` is the viewer benchmark's: a malformed shape, or a shape for another
    benchmark, is one line saying what to give, exit 2."""
    for argv, words in ((["bench", "viewer", "--shape", "800by20000"], "HxW"),
                        (["bench", "micro", "--shape", "800x20000"], "viewer")):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.splitlines() == [err.strip()] and "--shape" in err and words in err, err
