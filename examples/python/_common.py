"""The ending the checked examples share: run the checks, draw, show, exit non-zero on a failure.

Not an example itself: docs/conf.py's ``ignore_pattern`` keeps it out of the gallery. The
examples import it only when run as scripts (sphinx-gallery runs them so too, with this folder on
``sys.path``), so a benchmark that loads an example as a module does not need it.
"""
import sys

import matplotlib.pyplot as plt


def run_example(main, plot):
    """Runs ``main()``, which prints its checks and returns ``(status, shown)``, draws
    ``plot(*shown)`` (also after a failed check: the figure shows how it failed) and shows it.

    A failed check exits with ``status``; success returns instead of exiting, because the gallery
    runs the script in its own process and would stop at any ``SystemExit``.
    """
    status, shown = main()
    plot(*shown)
    plt.show()
    if status:
        sys.exit(status)
