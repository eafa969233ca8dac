"""The what-if page (``serve-web``): a local web app over the same library path as ``run-analytical``.

Units: the API answers in the library's units, seconds and bytes (summary.json's own
fields and ``units`` block); the page converts only for display.

The package holds the app (routes, request guards, one search at a time) and the page's
static files; it knows nothing of the command line. The command (engine/commands/serve_web.py)
hands the app a :class:`engine.web.port.PlanPort` built on run-analytical's own parser and
code path, so a plan's numbers on the page are run-analytical's for the same flags.
"""
