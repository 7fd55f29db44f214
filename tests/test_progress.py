"""Progress reporters, logging set-up and Spark's log level."""

from __future__ import annotations

import io
import re
import logging
import threading
from pathlib import Path

import pytest

from subzero import progress
from subzero.progress import (
    LoggingReporter, Reporter, TerminalReporter, choose_reporter, configure_logging, spark_conf, spark_log_level,
)


class FakeTerminal(io.StringIO):
    def isatty(self):
        return True


def test_the_default_reporter_does_nothing():
    reporter = Reporter()
    reporter.run_started("w", 3)
    reporter.node_started("a", 2)
    reporter.tiles_done("a", 2)
    reporter.node_finished("a")
    reporter.node_finished("b", ok=False)
    reporter.run_finished(ok=False)
    reporter.close()


def test_tiles_done_from_many_threads():
    out = FakeTerminal()
    reporter = TerminalReporter(out)
    reporter.run_started("demo", 2)
    reporter.node_started("blur", 40)
    threads = [threading.Thread(target=lambda: [reporter.tiles_done("blur") for _ in range(10)]) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    reporter.node_finished("blur", ok=False)  # a failed node's bar stays, with its count
    reporter.node_started("crd", 3)
    reporter.node_started("crd", 3)  # started again: a fresh bar
    reporter.node_finished("crd")
    reporter.close()
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())  # no colours, no cursor moves
    final = text.split("\r")[-1]  # the last frame: finished bars have left, the failed one stays
    assert re.search(r"blur \(failed\) \S+ 40/40 tiles", final) and "crd" not in final
    assert re.search(r"1/2\s+nodes", final)


def test_a_verbose_terminal_reporter_leaves_a_line_per_node():
    out = FakeTerminal()
    reporter = TerminalReporter(out, verbose=True)
    reporter.node_started("blur", 2)
    reporter.node_finished("blur")
    reporter.close()
    assert re.search(r"blur 2 tile\(s\) in \d+\.\d\d s", out.getvalue())


def test_choose_reporter():
    assert type(choose_reporter(FakeTerminal(), quiet=True)) is Reporter
    assert isinstance(choose_reporter(io.StringIO()), LoggingReporter)
    terminal = choose_reporter(FakeTerminal())
    assert isinstance(terminal, TerminalReporter)
    terminal.close()


@pytest.mark.parametrize("verbosity, quiet, shown", [
    (0, False, ["warning"]), (1, False, ["info", "warning"]), (2, False, ["debug", "info", "warning"]),
    (2, True, []),
])
def test_configure_logging_levels(verbosity, quiet, shown):
    buf = io.StringIO()
    configure_logging(verbosity, quiet, stream=buf)
    try:
        log = logging.getLogger("subzero.test")
        log.debug("debug")
        log.info("info")
        log.warning("warning")
        assert progress.current_verbosity() == (-1 if quiet else verbosity)
    finally:
        configure_logging(0)
    text = buf.getvalue()
    assert [w for w in ("debug", "info", "warning") if w in text] == shown
    if verbosity < 2 and shown:
        assert "subzero: warning: warning" in text.splitlines()


def test_configure_logging_replaces_its_handler(capsys):
    for _ in range(3):
        configure_logging(0)
    logging.getLogger("subzero.x").warning("once")
    assert capsys.readouterr().err == "subzero: warning: once\n"  # stderr as it is at emit time


def test_spark_log_level_and_conf():
    assert [spark_log_level(v) for v in (-1, 0, 1, 2, 3, 9)] == ["OFF", "OFF", "WARN", "INFO", "DEBUG", "DEBUG"]
    conf = spark_conf(1)
    assert conf["spark.ui.showConsoleProgress"] == "false"
    options = conf["spark.driver.extraJavaOptions"]
    assert "-Dsubzero.log.level=warn" in options
    config = Path(options.split("-Dlog4j2.configurationFile=file://")[1].split()[0])
    text = config.read_text()
    assert config.name == "log4j2.properties" and "${sys:subzero.log.level:-off}" in text
    assert "ThresholdFilter" in text
    assert progress.LOGGER == "subzero"



def test_docstring_examples():
    import doctest

    result = doctest.testmod(progress, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0
