"""Input arrays from files, and calling a workflow file's ``build()`` with them.

``subzero run WORKFLOW --input NAME=PATH --param KEY=VALUE`` reads each file with
`read_input` and hands the arrays and parameters to the workflow's ``build`` through
`call_build`. Supported files:

- ``.npy``: memory-mapped (``np.load(mmap_mode="r")``);
- FITS (``.fits``, ``.fit``, ``.fts``, optionally ``.gz``): ``file.fits`` takes the first
  HDU holding an image, ``file.fits[1]`` an HDU by index, ``file.fits[SCI]`` or
  ``file.fits[SCI,2]`` by EXTNAME (and EXTVER); the header comes back with the array;
- Zarr (a directory, or ``.zarr``): ``zarr.open_array(path, mode="r")``, read lazily.

Everything is checked before anything is written: a bad file, HDU, input name or
parameter is a `WorkflowError` naming the file and what to do.
"""

from __future__ import annotations

import inspect
import logging
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from subzero.errors import WorkflowError

if TYPE_CHECKING:
    from astropy.io.fits import Header

__all__ = ["read_input", "read_inputs", "parse_assignments", "call_build", "check_bound", "header_to_text",
           "header_from_text", "FITS_SUFFIXES"]

log = logging.getLogger(__name__)

FITS_SUFFIXES = (".fits", ".fit", ".fts", ".fits.gz", ".fit.gz", ".fts.gz", ".fits.fz")
_EXT = re.compile(r"^(?P<path>.+?)\[(?P<ext>[^\[\]]*)\]$")


def parse_assignments(items: list[str] | None, flag: str, what: str = "NAME=VALUE") -> dict[str, str]:
    """``["a=1", "b=x"]`` -> ``{"a": "1", "b": "x"}``; a malformed or repeated item is a `WorkflowError`.

    Examples
    --------
    >>> parse_assignments(["sigma=2.5"], "--param")
    {'sigma': '2.5'}
    """
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key or not value:
            raise WorkflowError(f"{flag} {item!r} must look like {what}")
        if key in out:
            raise WorkflowError(f"{flag} {key} is given twice ({out[key]!r} and {value!r}); give it once")
        out[key] = value
    return out


def _split_fits(spec: str) -> tuple[str, str | None]:
    """``"img.fits[SCI]"`` -> ``("img.fits", "SCI")``; no brackets -> ``(spec, None)``."""
    m = _EXT.match(spec)
    if m and m.group("path").lower().endswith(FITS_SUFFIXES):
        return m.group("path"), m.group("ext").strip()
    return spec, None


def _is_fits(path: str) -> bool:
    return path.lower().endswith(FITS_SUFFIXES)


def read_input(spec: str) -> tuple[Any, "Header | None"]:
    """The array a file holds, and its FITS header (``None`` for other formats).

    Parameters
    ----------
    spec
        ``PATH.npy``, ``PATH.fits``, ``PATH.fits[EXT]`` (index, EXTNAME or ``EXTNAME,EXTVER``),
        or a Zarr array (a directory or ``PATH.zarr``).

    Returns
    -------
    array, header
        A numpy array (memory-mapped for ``.npy``; native byte order for FITS) or a read-only
        ``zarr.Array``; an ``astropy.io.fits.Header`` for FITS, else ``None``.

    Raises
    ------
    WorkflowError
        The file is missing or unreadable, the extension does not exist or holds no image,
        or the format is not one of the above.

    Examples
    --------
    >>> import numpy as np, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "x.npy"); np.save(path, np.eye(2))
    >>> array, header = read_input(path); array.shape, header
    ((2, 2), None)
    """
    path, ext = _split_fits(spec)
    p = Path(path)
    if not p.exists():
        raise WorkflowError(f"input file {path!r} does not exist; check the path after NAME= in --input")
    if _is_fits(path):
        return _read_fits(p, ext)
    if p.suffix.lower() == ".npy":
        return _read_npy(p), None
    if p.is_dir() or p.suffix.lower() == ".zarr":
        return _read_zarr(p), None
    raise WorkflowError(f"input file {path!r}: unknown format {p.suffix or '(no suffix)'!r}; "
                        f"give a .npy file, a FITS file ({', '.join(FITS_SUFFIXES[:3])}, optionally [EXT]) "
                        "or a Zarr array directory")


def _read_npy(path: Path):
    import numpy as np

    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise WorkflowError(f"input file {str(path)!r} is not a readable .npy array ({_first_line(exc)})") from None
    if array.dtype == object or array.dtype.names:
        raise WorkflowError(f"input file {str(path)!r} holds dtype {array.dtype}; inputs must be numeric arrays")
    return array


def _read_zarr(path: Path):
    try:
        import zarr
    except ImportError:  # pragma: no cover - zarr is a dependency
        raise WorkflowError("reading Zarr inputs needs zarr>=3: pip install 'zarr>=3'") from None
    try:
        return zarr.open_array(str(path), mode="r")
    except Exception as exc:  # zarr raises several kinds for "not an array here"
        raise WorkflowError(f"input {str(path)!r} is not a readable Zarr array ({_first_line(exc)}); "
                            "give the array's directory, not a group's") from None


def _hdu_selector(ext: str) -> int | str | tuple[str, int]:
    if re.fullmatch(r"\d+", ext):
        return int(ext)
    name, _, ver = ext.partition(",")
    if ver.strip():
        if not ver.strip().isdigit():
            raise WorkflowError(f"FITS extension [{ext}]: the version after the comma must be an integer, e.g. [SCI,2]")
        return name.strip().upper(), int(ver)
    return name.strip().upper()


def _describe_hdus(hdus) -> str:
    parts = []
    for i, hdu in enumerate(hdus):
        shape = getattr(hdu, "shape", None) if _is_image(hdu) else None
        parts.append(f"[{i}] {hdu.name or '-'} {type(hdu).__name__}" + (f" {tuple(shape)}" if shape else ""))
    return "; ".join(parts)


def _is_image(hdu) -> bool:
    from astropy.io import fits

    return isinstance(hdu, (fits.PrimaryHDU, fits.ImageHDU, fits.CompImageHDU))


def _read_fits(path: Path, ext: str | None):
    import numpy as np

    try:
        from astropy.io import fits
    except ImportError:  # pragma: no cover - astropy is a dependency
        raise WorkflowError("reading FITS inputs needs astropy: pip install astropy") from None
    if ext == "":
        raise WorkflowError(f"input file {str(path)!r}: empty FITS extension []; give an index ([1]) or a name ([SCI])")
    try:
        hdus = fits.open(path, memmap=False)  # data are copied to native byte order anyway
    except Exception as exc:  # astropy raises OSError, ValueError, TypeError for damaged files
        raise WorkflowError(f"input file {str(path)!r} is not a readable FITS file ({_first_line(exc)})") from None
    with hdus:
        if ext is None:
            chosen = next((h for h in hdus if _is_image(h) and h.shape), None)
            if chosen is None:
                raise WorkflowError(f"FITS file {str(path)!r} holds no image HDU ({_describe_hdus(hdus)}); "
                                    "give the image extension, e.g. file.fits[1]")
        else:
            key = _hdu_selector(ext)
            try:
                chosen = hdus[key]
            except (KeyError, IndexError):
                raise WorkflowError(f"FITS file {str(path)!r} has no extension [{ext}]; it has: "
                                    f"{_describe_hdus(hdus)}") from None
            if not _is_image(chosen) or not chosen.shape:
                raise WorkflowError(f"FITS extension {str(path)!r}[{ext}] holds no image "
                                    f"({type(chosen).__name__}{', no data' if _is_image(chosen) else ''}); "
                                    f"image HDUs: {_describe_hdus(hdus)}")
        try:
            data = chosen.data
            # FITS stores big-endian; compute in native byte order (a copy, once)
            array = np.ascontiguousarray(data, dtype=data.dtype.newbyteorder("="))
        except Exception as exc:
            raise WorkflowError(f"cannot read the image in {str(path)!r}[{ext or chosen.name}] "
                                f"({_first_line(exc)})") from None
        header = chosen.header.copy()
    log.debug("read FITS %s[%s]: %s %s", path, ext if ext is not None else chosen.name, array.shape, array.dtype)
    return array, header


def read_inputs(specs: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, "Header"]]:
    """Read every ``--input NAME=PATH``: (name -> array, name -> FITS header for FITS inputs)."""
    arrays: dict[str, Any] = {}
    headers: dict[str, Header] = {}
    for name, spec in specs.items():
        array, header = read_input(spec)
        arrays[name] = array
        if header is not None:
            headers[name] = header
        log.info("input %s: %s, shape %s, %s", name, spec, tuple(array.shape), array.dtype)
    return arrays, headers


def header_to_text(header: "Header") -> str:
    """A FITS header as text (80-character cards), for storing it in a catalog.

    Examples
    --------
    >>> from astropy.io import fits
    >>> header_from_text(header_to_text(fits.Header({"OBJECT": "M31"})))["OBJECT"]
    'M31'
    """
    return header.tostring(sep="\n")


def header_from_text(text: str) -> "Header":
    """The inverse of `header_to_text`."""
    from astropy.io import fits

    return fits.Header.fromstring(text, sep="\n")


def node_fits_header(run: Any, node: str) -> "Header | None":
    """The FITS header kept with ``node`` of a stored run (an input read from FITS): the text in
    its catalog record's ``metadata["fits_header"]`` (`header_to_text`), or None."""
    record = run.catalog.nodes.get(run.node(node).name)
    text = record.metadata.get("fits_header") if record is not None else None
    return header_from_text(text) if text else None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


# -- build() ---------------------------------------------------------------------------------

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _convert(value: str, param: inspect.Parameter, key: str, where: str) -> Any:
    """A ``--param`` string converted to the parameter's annotated or default type."""
    kind = param.annotation if param.annotation is not inspect.Parameter.empty else None
    if isinstance(kind, str):  # postponed annotations: "int", "float", "bool", "str"
        kind = {"int": int, "float": float, "bool": bool, "str": str}.get(kind.split("|")[0].strip())
    if kind not in (int, float, bool, str) and param.default is not inspect.Parameter.empty \
            and param.default is not None:
        kind = type(param.default)
    try:
        if kind is bool:
            if value.lower() in _TRUE:
                return True
            if value.lower() in _FALSE:
                return False
            raise ValueError
        if kind in (int, float):
            return kind(value)
    except ValueError:
        raise WorkflowError(f"--param {key}={value!r}: {where} expects {kind.__name__} for {key!r}") from None
    return value


def call_build(build: Callable, where: str, inputs: Mapping[str, Any], params: Mapping[str, str],
               quick: bool = False) -> tuple[Any, dict[str, Any]]:
    """Call a workflow file's ``build`` with the files and parameters given on the command line.

    How ``build`` receives them follows its signature:

    - a parameter named ``inputs`` (or else a first positional parameter without a default)
      receives the dict of input name -> array from ``--input`` (empty without files);
    - a parameter named ``params`` receives every ``--param`` as a dict of strings;
    - otherwise each ``--param KEY=VALUE`` is passed as keyword ``KEY`` (converted to the
      type of its annotation or default: int, float, bool or str); ``**kwargs`` takes any;
    - a parameter named ``quick`` receives ``--quick``.

    ``build`` returns ``(workflow, inputs)`` or just the workflow; files given with
    ``--input`` replace (or complete) the inputs it returns.

    Raises
    ------
    WorkflowError
        ``--input``, ``--param`` or ``--quick`` given to a ``build`` that cannot take them,
        an unknown parameter, a value of the wrong type, or a wrong return value.

    Examples
    --------
    >>> import subzero as sz
    >>> def build(inputs, sigma: float = 1.0):
    ...     wf = sz.Workflow(f"blur{sigma}")
    ...     wf.add(sz.operators.GaussianFilter(sigma), wf.input("x"), name="blur")
    ...     return wf
    >>> wf, inputs = call_build(build, "flow.py", {"x": [[1.0]]}, {"sigma": "2"})
    >>> wf.name, inputs
    ('blur2.0', {'x': [[1.0]]})
    """
    try:
        sig = inspect.signature(build, eval_str=True)
    except NameError:  # an annotation that does not evaluate: read it as text
        sig = inspect.signature(build)
    except (TypeError, ValueError):  # pragma: no cover - builtins without signatures
        raise WorkflowError(f"{where}: build must be a Python function") from None
    ps = sig.parameters
    var_kw = any(p.kind is p.VAR_KEYWORD for p in ps.values())
    named = {n: p for n, p in ps.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    usage = f"{where}: build{sig}"
    kwargs: dict[str, Any] = {}

    inputs_param = "inputs" if "inputs" in named else None
    if inputs_param is None:
        first = next(iter(ps.values()), None)
        if first is not None and first.kind in (first.POSITIONAL_ONLY, first.POSITIONAL_OR_KEYWORD) \
                and first.default is first.empty and first.name not in ("params", "quick"):
            inputs_param = first.name
    if inputs_param is not None:
        kwargs[inputs_param] = dict(inputs)

    if "quick" in named:
        kwargs["quick"] = quick
    elif quick:
        raise WorkflowError(f"--quick: {usage} takes no 'quick' parameter; add 'quick: bool = False' "
                            "to build() or drop --quick")

    if "params" in named:
        kwargs["params"] = dict(params)
    else:
        reserved = {inputs_param, "quick"}
        for key, value in params.items():
            if key in named and key not in reserved:
                kwargs[key] = _convert(value, named[key], key, usage)
            elif var_kw and key not in reserved:
                kwargs[key] = value
            else:
                takes = [n for n in named if n not in reserved]
                raise WorkflowError(f"unknown --param {key!r}: {usage} takes "
                                    f"{', '.join(repr(t) for t in takes) if takes else 'no parameters'}"
                                    "; declare it in build() or add **params")
    missing = [n for n, p in ps.items() if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
               and n not in kwargs]
    if missing:
        raise WorkflowError(f"{usage} needs {', '.join(repr(m) for m in missing)}; "
                            f"give {' '.join(f'--param {m}=VALUE' for m in missing)}")
    if inputs_param is None and inputs:
        log.debug("%s: build() takes no inputs; --input replaces the arrays it returns", where)
    result = build(**kwargs)
    return _unpack(result, where, inputs)


def _unpack(result: Any, where: str, files: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
    from subzero.dag import Workflow

    if isinstance(result, Workflow):
        wf, arrays = result, {}
    elif isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], Workflow) \
            and isinstance(result[1], Mapping):
        wf, arrays = result[0], dict(result[1])
    else:
        raise WorkflowError(f"{where}: build() must return a Workflow or (workflow, inputs dict), "
                            f"got {type(result).__name__}")
    arrays.update(files)
    return wf, arrays


def check_bound(wf: Any, arrays: Mapping[str, Any], given: Mapping[str, str]) -> None:
    """Every input of ``wf`` has an array, and every ``--input`` name is an input of ``wf``.

    Raises
    ------
    WorkflowError
        Naming the workflow's inputs and the ``--input`` flag to use.
    """
    names = [n.name for n in wf.inputs]
    unknown = [k for k in given if k not in names]
    if unknown:
        raise WorkflowError(f"--input {unknown[0]}=...: workflow {wf.name!r} has no input {unknown[0]!r}; "
                            f"its inputs are {', '.join(names) or '(none)'}")
    missing = [n for n in names if n not in arrays]
    if missing:
        raise WorkflowError(f"workflow {wf.name!r} needs input {missing[0]!r}: give --input {missing[0]}=PATH "
                            "(.npy, .fits[EXT] or Zarr)")
