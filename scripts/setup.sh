#!/usr/bin/env bash
# Set up subzero on a fresh machine: Java for Spark (if missing), a virtualenv in .venv,
# the package with its test, workflow, notebook, docs and corpus extras, then the benchmarks (benchmarks/, a
# distribution of their own: subzero-benchmarks, package subzero_bench) on top of it. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

java_ok() {
  command -v java >/dev/null 2>&1 || return 1
  local v
  v=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n1)
  [[ -n "$v" && "$v" -ge 17 ]]
}

if ! java_ok; then
  if command -v apt-get >/dev/null 2>&1 && [[ $(id -u) -eq 0 ]]; then
    echo "setup: installing Java 17 for Spark (openjdk-17-jre-headless)" >&2
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >/dev/null
  else
    echo "setup: Spark needs Java 17 or newer and none was found." >&2
    echo "setup: install it (Debian/Ubuntu: sudo apt-get install openjdk-17-jre-headless) and run this again." >&2
    exit 1
  fi
fi

# the viewer's browser test drives Debian's chromium with its chromedriver (no browser download)
if ! { command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; }; then
  if command -v apt-get >/dev/null 2>&1 && [[ $(id -u) -eq 0 ]]; then
    echo "setup: installing chromium and chromium-driver for the viewer's browser test" >&2
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
  else
    echo "setup: chromium/chromedriver not found and not root: the viewer's browser test will be skipped" >&2
    echo "setup: (Debian/Ubuntu: sudo apt-get install chromium chromium-driver)" >&2
  fi
fi

PY=${PYTHON:-python3}
if [[ ! -x .venv/bin/python ]]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip >/dev/null 2>&1 || true
if ! .venv/bin/python -m pip install -q --disable-pip-version-check -e ".[test,workflows,notebook,docs,corpus]" 2>&1 \
  | { grep -v -e "^WARNING: Location" -e "is ignored" || true; }; then
  echo "setup: pip could not install the package and its extras; see its output above" >&2
  exit 1
fi
# the benchmarks, after the package they depend on (`subzero bench NAME`, `python -m subzero_bench NAME`)
if ! .venv/bin/python -m pip install -q --disable-pip-version-check -e ./benchmarks 2>&1 \
  | { grep -v -e "^WARNING: Location" -e "is ignored" || true; }; then
  echo "setup: pip could not install the benchmarks (benchmarks/); see its output above" >&2
  exit 1
fi
.venv/bin/python -c "import subzero.store, subzero.run, pyspark, lmdb, rtree, pulp, zarr, xxhash, \
astroscrappy, threadpoolctl, sep, skimage, sksurv, pyarrow, pytest, xdist, hypothesis, starlette, uvicorn, selenium, httpx2, PIL, \
moto.server, s3fs, subzero.tools.view.app, subzero_bench, mkdocs, material, mkdocstrings_handlers.python, \
mkdocs_jupyter, mkdocs_awesome_pages_plugin, ipykernel, anywidget, subzero.tools.view.widget, astropy, photutils, conorm, pyet, spyndex, chemotools, xarray" \
  || { echo "setup: the package did not install; see the pip output above" >&2; exit 1; }
