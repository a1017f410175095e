"""The review page (``salvagelane ui``): a small local web page over the store.

The only package that imports the web framework (Starlette, served by uvicorn). It reads
and acts through the same code as the command line; see :mod:`salvagelane.ui.app` and,
for who may read and change what, :mod:`salvagelane.ui.security`.
"""

from salvagelane.errors import MissingExtraError

try:
    # Every module of the page imports one or the other; checked once, here, where the
    # command first imports the package.
    import starlette  # noqa: F401
    import uvicorn  # noqa: F401
except ImportError as exc:
    raise MissingExtraError("salvagelane ui needs the review page's packages", extra="ui") from exc
