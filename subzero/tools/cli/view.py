"""``subzero view``: serve the viewer (`subzero.tools.view`) over a store."""

from __future__ import annotations

import argparse

__all__ = ["add_parser", "cmd_view"]


def cmd_view(args: argparse.Namespace) -> int:
    """``subzero view``: serve the viewer over a store until interrupted; the exit status."""
    from subzero.tools.view.server import serve

    serve(args.store, host=args.host, port=args.port, open_browser=args.open, token=args.token, workers=args.workers)
    return 0


def add_parser(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """``subzero view``."""
    view = sub.add_parser("view", parents=[common], help="browse a store in a web page, with linked brushing",
                          description="Serve a page showing every node of a stored run (2-D nodes as pan/zoom "
                                      "images) where brushing cells of one node highlights their backward lineage "
                                      "upstream and forward lineage downstream; read-only; Ctrl-C stops it.")
    view.add_argument("store")
    view.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    view.add_argument("--port", type=int, default=8765, help="port (default 8765)")
    view.add_argument("--open", action="store_true", help="open the page in a web browser")
    view.add_argument("--token", default=None,
                      help="the token every request must carry (?token=T in the URL, or the header "
                           "'Authorization: token T'); default: none on a loopback address, a random one (printed "
                           "in the URL) on any other")
    view.add_argument("--workers", type=int, default=None, metavar="N",
                      help="processes answering requests on the one port (default: the view_workers setting, else "
                           "the cores this process may use, at most 4); more than one lets many clients brush at "
                           "once on every core")
    view.set_defaults(func=cmd_view)
