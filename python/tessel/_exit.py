"""Autograd contexts emptied when the interpreter exits, so that core objects they hold are freed.

torch never frees the Python side of an autograd graph that is still alive when the interpreter
exits (a script's global `loss`, say): its nodes skip the decref once finalization has begun.
Core objects reachable from such a graph's ctx (a bound reduction, or a loop tool's run holding
the user's function and the Genreds it calls) would never be freed, and nanobind would report
them as leaked; so each ctx that may hold one is registered here and cleared at exit (the graph
cannot be used after that). Any module may import this one: it imports nothing of tessel.
"""
import atexit
import weakref

_live = weakref.WeakSet()


def keep_until_exit(ctx):
    """Registers an autograd ctx to be emptied at interpreter exit (held weakly until then)."""
    _live.add(ctx)


@atexit.register
def _drop_live_ctx():
    for ctx in list(_live):
        ctx.__dict__.clear()
