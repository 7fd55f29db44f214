"""subzero.config: defaults < config file < environment < config.set, typed values, clear errors,
nothing read at import time, every SUBZERO_* read in the package going through it, and the
documented table equal to the record."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import subzero as sz
from subzero import config

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def no_file(tmp_path, monkeypatch):
    """No config file of the user's; every SUBZERO_* setting variable unset."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("SUBZERO_CONFIG", raising=False)
    for s in config.SETTINGS:
        if s.name != "cache":
            monkeypatch.delenv(s.env, raising=False)
    return tmp_path


def test_every_setting_has_its_default_without_file_or_environment(no_file):
    for s in config.SETTINGS:
        if s.name == "cache":
            continue
        assert config.get(s.name) == s.default and config.source(s.name) == "default", s.name


def test_the_order_is_default_file_environment_set(no_file, monkeypatch):
    path = no_file / "sz.toml"
    path.write_text("s3_retries = 4\nfuse = false\n[subzero]\ntasks_per_core = 7\n")
    monkeypatch.setenv("SUBZERO_CONFIG", str(path))
    assert (config.get("s3_retries"), config.source("s3_retries")) == (4, str(path))
    assert config.get("fuse") is False and config.get("tasks_per_core") == 7
    monkeypatch.setenv("SUBZERO_S3_RETRIES", "5")
    assert (config.get("s3_retries"), config.source("s3_retries")) == (5, "environment")
    with config.set(s3_retries=6):
        assert (config.get("s3_retries"), config.source("s3_retries")) == (6, "set()")
        with config.set(fuse=True):
            assert config.get("s3_retries") == 6 and config.get("fuse") is True
        assert config.get("fuse") is False
    assert config.get("s3_retries") == 5


def test_the_default_file_is_read_from_the_users_config_directory(no_file):
    path = no_file / ".config" / "subzero" / "config.toml"
    path.parent.mkdir(parents=True)
    path.write_text("chunk_cache_mb = 12.5\n")
    assert config.config_path() == path and config.get("chunk_cache_mb") == 12.5
    path.write_text("chunk_cache_mb = 3\n")  # a changed file is read again
    import os

    os.utime(path, ns=(1, 1))
    assert config.get("chunk_cache_mb") == 3.0


@pytest.mark.parametrize("name,text,value", [
    ("fuse", "0", False), ("fuse", "off", False), ("fuse", "YES", True), ("in_process_bytes", "0", 0),
    ("cache_max_bytes", "2e9", 2 * 10**9), ("chunk_cache_mb", "0.5", 0.5), ("compressor", "lz4", "lz4"),
    ("spark_master", "spark://h:7077", "spark://h:7077"),
])
def test_environment_values_are_parsed_to_the_settings_type(no_file, monkeypatch, name, text, value):
    setting = next(s for s in config.SETTINGS if s.name == name)
    monkeypatch.setenv(setting.env, text)
    got = config.get(name)
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize("env,text,words", [
    ("SUBZERO_FUSE", "maybe", ["SUBZERO_FUSE", "'maybe'", "bool"]),
    ("SUBZERO_S3_RETRIES", "3.5", ["SUBZERO_S3_RETRIES", "'3.5'", "int"]),
    ("SUBZERO_S3_RETRIES", "0", ["SUBZERO_S3_RETRIES", "below 1"]),
    ("SUBZERO_SPARK_START_TIMEOUT", "soon", ["SUBZERO_SPARK_START_TIMEOUT", "'soon'", "float"]),
    ("SUBZERO_COMPRESSOR", "gzip", ["SUBZERO_COMPRESSOR", "'gzip'", "lz4"]),
])
def test_a_bad_value_names_the_variable_the_type_and_the_value(no_file, monkeypatch, env, text, words):
    monkeypatch.setenv(env, text)
    name = env.removeprefix("SUBZERO_").lower()
    with pytest.raises(sz.ConfigError) as caught:
        config.get(name)
    assert isinstance(caught.value, ValueError)
    for word in words:
        assert word in str(caught.value)


def test_bad_files_unknown_names_and_bad_set_values_are_errors(no_file, monkeypatch):
    path = no_file / "sz.toml"
    monkeypatch.setenv("SUBZERO_CONFIG", str(path))
    with pytest.raises(sz.ConfigError, match="no such config file"):
        config.get("fuse")
    path.write_text("s3_retrys = 3\n")
    with pytest.raises(sz.ConfigError, match="unknown settings s3_retrys"):
        config.get("fuse")
    path.write_text("fuse = [1\n")
    with pytest.raises(sz.ConfigError, match="cannot be read"):
        config.get("fuse")
    path.write_text('fuse = "perhaps"\n')
    with pytest.raises(sz.ConfigError, match=r"fuse='perhaps' is not a valid bool"):
        config.get("fuse")
    monkeypatch.delenv("SUBZERO_CONFIG")
    with pytest.raises(sz.ConfigError, match="unknown setting 'fusion'"):
        config.get("fusion")
    with pytest.raises(sz.ConfigError, match="unknown setting"):
        config.set(fusion=False)
    with pytest.raises(sz.ConfigError, match=r"config.set\(s3_retries\)='many'"):
        config.set(s3_retries="many")


def test_set_is_private_to_a_thread(no_file):
    seen: dict[str, int] = {}
    inside, leave = threading.Event(), threading.Event()

    def other() -> None:
        inside.wait(5)
        seen["other"] = config.get("s3_retries")
        leave.set()

    thread = threading.Thread(target=other)
    thread.start()
    with config.set(s3_retries=2):
        inside.set()
        leave.wait(5)
        seen["mine"] = config.get("s3_retries")
    thread.join(5)
    default = next(s.default for s in config.SETTINGS if s.name == "s3_retries")
    assert seen == {"other": default, "mine": 2} and default != 2


class SettingProbe(sz.Operator):
    """Outputs the ``s3_retries`` setting its tile's thread sees, in every cell."""

    tiling = sz.Elementwise()

    def supported_modes(self):
        return {sz.Mode.MAP}

    def run(self, ctx, x):
        import numpy as np

        return np.full(x.shape, config.get("s3_retries"), dtype=np.int64)

    def infer_output_shape(self, input_shapes):
        return input_shapes[0]

    def map_b(self, cells, i):
        return cells

    def map_f(self, cells, i):
        return cells


def test_the_local_executors_threads_see_the_callers_overrides(no_file, tmp_path):
    import numpy as np

    from subzero.executors import LocalExecutor

    wf = sz.Workflow("probe")
    wf.add(SettingProbe(), wf.input("x"), name="probe")
    with config.set(s3_retries=7, local_threads=2):
        run = wf.run({"x": np.zeros((16, 16))}, store=str(tmp_path / "probe"), executor="local", tile_shape=4)
    assert np.unique(np.asarray(run.output("probe"))).tolist() == [7]  # 16 tiles, on 2 threads
    with config.set(local_threads=2):
        assert LocalExecutor().threads == 2
    assert LocalExecutor(threads=3).threads == 3


def test_a_run_honours_set_and_the_environment(no_file, tmp_path, monkeypatch):
    import numpy as np
    from subzero import operators as ops

    wf = sz.Workflow("cfg")
    x = wf.input("x")
    wf.add(ops.Threshold(0.5), wf.add(ops.Convolve(np.ones((3, 3))), x, name="blur"), name="mask")
    data = {"x": np.random.default_rng(0).random((20, 20))}
    runs = {}
    for fuse in (True, False):
        with config.set(fuse=fuse, compressor="lz4"):
            runs[fuse] = wf.run(data, store=str(tmp_path / str(fuse)), executor="local", tile_shape=10)
    assert np.array_equal(np.asarray(runs[True].output("mask")), np.asarray(runs[False].output("mask")))
    assert "lz4" in (tmp_path / "False" / "arrays" / "mask" / "zarr.json").read_text().lower() or \
        "blosc" in (tmp_path / "False" / "arrays" / "mask" / "zarr.json").read_text().lower()


def test_once_resolves_each_setting_once_yet_sees_set_inside(no_file, monkeypatch):
    """A run reads its settings inside `config.once`: the first read of each is kept, a `set`
    made inside still wins, and outside nothing is kept."""
    reads = []
    resolve = config._resolve
    monkeypatch.setattr(config, "_resolve", lambda name, *held: reads.append(name) or resolve(name, *held))
    files = []
    look = config._file_values
    monkeypatch.setattr(config, "_file_values", lambda: files.append(1) or look())
    with config.once():
        assert config.get("s3_retries") == config.get("s3_retries") == config.get("s3_retries")
        monkeypatch.setenv("SUBZERO_S3_RETRIES", "9")
        assert config.get("s3_retries") != 9  # kept as first read
        with config.set(s3_retries=4):
            assert config.get("s3_retries") == 4
            with config.once():  # nested: the outer one's values
                assert config.get("s3_retries") == 4
        assert config.get("s3_retries") != 9
    assert reads.count("s3_retries") == 3  # once, then the two reads under set()
    files.clear()
    with config.once():
        config.get("fuse"), config.get("compressor"), config.get("hold_mb")
    assert len(files) == 1  # the config file is looked at once
    assert config.get("s3_retries") == 9  # outside: resolved at use again


def test_nothing_is_read_at_import_time():
    """A bad value in the environment does not break ``import subzero`` or the modules that read
    settings: only the use of the setting fails."""
    code = ("import subzero, subzero.driver, subzero.store.arrays, subzero.store.cache, subzero.store.location, "
            "subzero.executors, subzero.tools.view.tiles\n"
            "try:\n    subzero.config.get('fuse')\nexcept subzero.ConfigError as e:\n    print('late:', e)\n")
    env = {"PYTHONPATH": str(ROOT), "SUBZERO_FUSE": "maybe", "SUBZERO_S3_RETRIES": "x", "SUBZERO_CHUNK_CACHE_MB": "x",
           "SUBZERO_CACHE_MAX_BYTES": "x", "SUBZERO_IN_PROCESS_BYTES": "x", "HOME": "/nonexistent"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("late: SUBZERO_FUSE='maybe'")


def _environment_reads(path: Path) -> list[str]:
    """``os.environ.get("SUBZERO_...")`` / ``os.environ["SUBZERO_..."]`` / ``os.getenv`` in a file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and re.fullmatch(r"SUBZERO_[A-Z0-9_]+",
                                                                                           node.value):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.value}")
    return found


def test_the_package_reads_settings_only_through_config():
    """No module but `subzero.config` names a SUBZERO_* variable as a string to look up (the
    benchmarks' own switches excepted: they are not package settings)."""
    stray = []
    for path in sorted((ROOT / "subzero").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel == "subzero/config.py" or rel.startswith("subzero/bench/"):
            continue
        stray += _environment_reads(path)
    assert not stray, stray


def test_the_guide_holds_the_table_of_the_record():
    text = (ROOT / "docs" / "guide" / "configuration.md").read_text()
    assert config.markdown_table() in text, ("docs/guide/configuration.md's table differs from subzero/config.py; "
                                             "paste config.markdown_table() between its markers")
    for s in config.SETTINGS:
        assert f"| `{s.name}` | `{s.env}` |" in text


def test_the_config_command_prints_every_setting_and_its_source(no_file, monkeypatch, capsys):
    from subzero.tools.cli import main

    monkeypatch.setenv("SUBZERO_TASKS_PER_CORE", "9")
    assert main(["config"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("config file: ") and len(lines) == 1 + len(config.SETTINGS)
    assert lines[1 + [s.name for s in config.SETTINGS].index("tasks_per_core")].split() == ["tasks_per_core", "9",
                                                                                            "environment"]
    monkeypatch.setenv("SUBZERO_FUSE", "maybe")
    assert main(["config"]) == 2
    assert "SUBZERO_FUSE='maybe'" in capsys.readouterr().err
