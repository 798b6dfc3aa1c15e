"""Sphinx configuration.  Build (offline, warnings are errors):

    python -m pip install -e ".[docs]" && python -m sphinx -W --keep-going -b html docs docs/_build/html
"""

import fastsm

project = "fastsm"
author = "fastsm developers"
copyright = "2026, fastsm developers"
release = fastsm.__version__
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.mathjax",
    "numpydoc",
    "myst_parser",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build"]
myst_enable_extensions = ["dollarmath", "amsmath"]
myst_heading_anchors = 3

# numpydoc: one table per class, no autosummary stubs; every referenced name must resolve.
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False
autodoc_default_options = {"member-order": "bysource"}

html_theme = "pydata_sphinx_theme"
html_title = f"fastsm {release}"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
}
# MathJax is loaded by the browser from its CDN when the page is read; the build itself needs no network.
