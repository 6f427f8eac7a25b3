"""Sphinx configuration of daliloader's documentation.

Sphinx, as DALI and TensorFlow's own API docs use: the docstrings are reStructuredText with Sphinx
cross-references, which autodoc renders as they are, and nitpicky mode with warnings as errors turns a
broken link, anchor or reference (in the pages or in a docstring) into a failed build. The pages are
Markdown (MyST), which GitHub renders too. ``tests/test_docs.py`` builds the site strictly in every
``make test``; ``make docs`` builds it into ``build/docs``.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # autodoc imports Keras: fewer TensorFlow log lines

import daliloader  # noqa: E402

project = "daliloader"
release = version = daliloader.__version__
author = "the daliloader authors"
copyright = "2026, the daliloader authors"

extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinxarg.ext"]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build"]
html_theme = "furo"
html_title = f"daliloader {release}"

# Headings get anchors (`page.md#a-heading`), so links into a section are checked like links to a page.
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]

autodoc_member_order = "bysource"
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_typehints = "signature"

# Every reference must resolve, except to the libraries around us (their inventories are not fetched:
# the build runs offline), to builtins, and to private base classes (shown as a public class's bases).
nitpicky = True
nitpick_ignore_regex = [
    (r"py:.*", r"(numpy|np|tensorflow|tf|keras|nvidia|cv2|argparse|collections|pathlib|os|re|concurrent|typing|enum|"
               r"inspect|tarfile|datetime)\b.*"),
    (r"py:.*", r"(int|float|str|bytes|bool|dict|list|tuple|set|object|callable|None|Path|Iterable|Iterator|"
               r"Sequence|Mapping|Callable|Any|ndarray)"),
    (r"py:class", r"daliloader\..*\._\w+"),
    # a dataclass field annotated dict[str, X] reaches the nitpicker split at its comma
    (r"py:class", r"dict\[str"),
]


def google_sections(app, what, name, obj, options, lines):
    """The public functions' ``Args:``/``Returns:``/``Raises:`` sections (Keras' docstring style) as
    Sphinx fields, through napoleon's parser. Functions and methods only: napoleon would read the
    ``text: more text`` of an attribute's doc comment as a type."""
    from sphinx.ext.napoleon import Config, GoogleDocstring

    if what in ("function", "method"):
        lines[:] = GoogleDocstring(lines, Config(), app, what, name, obj, options).lines()


def setup(app):
    app.connect("autodoc-process-docstring", google_sections)
