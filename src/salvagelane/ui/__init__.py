"""The review page (``salvagelane ui``): a small local web page over the store.

The only package that imports the web framework (Starlette, served by uvicorn). It reads
and acts through the same code as the command line; see :mod:`salvagelane.ui.app` and,
for who may read and change what, :mod:`salvagelane.ui.security`.
"""
