"""A bounded least-recently-used cache for the front ends' per-formula objects.

Programs that build formulas in a loop (a new constant, a new shape each step) must not grow a
process without bound: every cache of reductions, gradients or Genred objects is one of these.
"""
from collections import OrderedDict
import threading


class LruCache:
    """At most `maxsize` entries; get_or_make(key, make) returns the cached value or make()'s,
    dropping the least recently used entry when full. Thread-safe; make() runs outside the lock
    (two threads may both build a missing value, and one of them is kept)."""

    def __init__(self, maxsize):
        if maxsize < 1:
            raise ValueError(f"LruCache: maxsize must be >= 1, got {maxsize}")
        self.maxsize = maxsize
        self._data = OrderedDict()
        self._lock = threading.Lock()

    def get_or_make(self, key, make):
        with self._lock:
            value = self._data.get(key)
            if value is not None:
                self._data.move_to_end(key)
                return value
        value = make()
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.maxsize:
                self._data.popitem(last=False)
        return value

    def clear(self):
        with self._lock:
            self._data.clear()

    def __len__(self):
        return len(self._data)
