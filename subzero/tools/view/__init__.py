"""``subzero view``: a stored run in the browser, with linked brushing (see `subzero.tools.view.app`)."""
