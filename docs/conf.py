"""Sphinx configuration of the documentation site: guides (MyST), gallery, API references."""
import os
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
BUILD = pathlib.Path(os.environ.get("TESSEL_DOCS_BUILD", ROOT / "build" / "docs"))
# The package under documentation is the one built into build/python (scripts/build.sh).
sys.path.insert(0, str(ROOT / "build" / "python"))

project = "tessel"
author = "the tessel developers"
copyright = "2026, " + author

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.intersphinx",
    "numpydoc",
    "myst_parser",
    "sphinx_gallery.gen_gallery",
    "breathe",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build", "images/README.md", "sg_execution_times.rst"]
myst_heading_anchors = 3

html_theme = "furo"
html_title = "tessel"
html_static_path = []
# The site works offline and from file://: no extension that loads from a CDN (MathJax).
html_theme_options = {"navigation_with_keys": True}

autodoc_member_order = "bysource"
autodoc_typehints = "none"
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False
intersphinx_mapping = {}

# The gallery: every script of examples/python at its small default size. A failing example
# fails the build (the docs build runs in the test command).
sphinx_gallery_conf = {
    "examples_dirs": str(ROOT / "examples" / "python"),
    "gallery_dirs": "auto_examples",
    # TESSEL_DOCS_EXAMPLES (a regex on the path) runs a subset while writing an example.
    "filename_pattern": os.environ.get("TESSEL_DOCS_EXAMPLES",
                                       r"/(?!distributed_torchrun)[^/]+\.py$"),
    "ignore_pattern": r"__init__\.py|_common\.py",
    "abort_on_example_error": True,
    "only_warn_on_example_error": False,
    "download_all_examples": False,
    "remove_config_comments": True,
    "within_subsection_order": "FileNameSortKey",
    "matplotlib_animations": False,
    "image_scrapers": ("matplotlib",),
    "show_memory": False,
    # Its timing pages load jQuery from a CDN: the site stays offline-clean without them (the
    # build log prints each example's time).
    "write_computation_times": False,
    "plot_gallery": os.environ.get("TESSEL_DOCS_GALLERY", "True"),
}

breathe_projects = {"tessel": str(BUILD / "doxygen" / "xml")}
breathe_default_project = "tessel"
breathe_domain_by_extension = {"hpp": "cpp"}
cpp_index_common_prefix = ["tessel::"]
# breathe declares `namespace tessel` once per header section of the C++ page; Sphinx's C++
# domain calls each repeat a duplicate. Only that page declares C++ names.
suppress_warnings = ["duplicate_declaration.cpp"]


def _plain_text_marks(app, what, name, obj, options, lines):
    """Docstrings are written to be read as plain text too (help(), IDEs): `|x - y|` is a norm
    `*y0.shape` an unpacking and `means_` an attribute, not reStructuredText substitutions,
    emphasis or links. Escapes `|`, `*` and trailing `_` in prose lines (not in doctests, literal blocks, inline literals or numpydoc's
    parameter-name lines) before numpydoc reads the sections."""
    import re

    literal_indent = None
    for k, line in enumerate(lines):
        stripped = line.lstrip()
        indent = len(line) - len(stripped)
        if literal_indent is not None:
            if stripped and indent <= literal_indent:
                literal_indent = None
            else:
                continue
        if stripped.startswith((">>>", "...")) or not stripped:
            continue
        if line.rstrip().endswith("::"):
            literal_indent = indent
        if indent == 0 and k > 0 and re.match(r"^\**[\w., ]+( : .*)?$", line):
            continue  # a numpydoc parameter name line ("x : tensor", "**options")
        parts = re.split(r"(``.*?``)", line)
        lines[k] = "".join(p if p.startswith("``") else
                           re.sub(r"(\w)_(?=\W|$)", r"\1\\_",  # means_: an attribute, not a link
                                  p.replace("\\", "\\\\").replace("|", "\\|")
                                  .replace("*", "\\*"))
                           for p in parts)


def setup(app):
    app.connect("autodoc-process-docstring", _plain_text_marks, priority=400)
