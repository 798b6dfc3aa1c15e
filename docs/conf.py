"""Sphinx configuration (``pip install -e ".[docs]"``, then ``sphinx-build docs docs/_build``)."""

project = "fastsm"
extensions = ["sphinx.ext.autodoc", "sphinx.ext.mathjax", "numpydoc", "myst_parser"]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
numpydoc_show_class_members = False
exclude_patterns = ["_build"]
html_theme = "alabaster"
