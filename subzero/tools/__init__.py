"""The tools around a run: the ``subzero`` command line (``cli``), the web viewer (``view``),
and what they show a run with: ``info``, ``explain``, ``describe`` (``--json``), ``brush``
(linked brushing) and ``export`` (masks, DS9 regions, FITS, PNG panels).

The core (``subzero`` itself) imports nothing from here; these modules import the core.
"""
