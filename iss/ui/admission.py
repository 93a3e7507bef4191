"""How visitors share the machine: live runs and comparisons, one per visitor, refused at once beyond that.

A live run computes for up to 15 minutes whether or not anyone reads it, so live runs do not wait in the
app's queue (where a handful of them would fill it for everyone): each is admitted or refused the moment it
is asked for (``LiveRuns``). Comparisons take turns in the order asked (``Turns``), one waiting or running per
visitor, so a client that asks for many holds one place in line, not the whole line. A visitor is a session
or a client address; either one already holding a place is refused, so neither new sessions from one
address nor one session from several addresses get more.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from .analysis import MAX_LIVE_SECONDS

__all__ = ["LiveRuns", "Refused", "Turns"]


class Refused(ValueError):
    """A live run not admitted now; its message is the one line the visitor sees."""


class LiveRuns:
    """The live runs going on now, at most ``slots`` of them and one per session or address."""

    def __init__(self, slots: int = 1) -> None:
        self.slots = slots
        self._lock = threading.Lock()
        self._running: list[tuple[str, str]] = []  # (session, address) of each run
        self._stops: dict[tuple[str, str], threading.Event] = {}  # each run's stop flag

    @contextmanager
    def admit(self, session: str, address: str, stop: threading.Event) -> Iterator[None]:
        """Hold a slot for the run of ``session`` from ``address`` (``stop`` ends it: :meth:`stop_all`) while
        the block runs; ``Refused``
        (one line, for the visitor) when that visitor already has a run or every slot is taken."""
        visitor = (session, address)
        with self._lock:
            if any(session == s or address == a for s, a in self._running):
                raise Refused(
                    "you already have a live run going (one per visitor): press Stop or wait for it to end"
                )
            if len(self._running) >= self.slots:
                raise Refused(
                    f"the machine's live-run slot{'s are' if self.slots > 1 else ' is'} taken by another "
                    f"visitor (a run lasts at most {MAX_LIVE_SECONDS // 60} min): try again later, or see "
                    "Recorded runs below"
                )
            self._running.append(visitor)
            self._stops[visitor] = stop
        try:
            yield
        finally:
            with self._lock:
                self._running.remove(visitor)
                del self._stops[visitor]

    def stop_all(self) -> None:
        """Ask every live run to stop (at shutdown): each ends within a layer of its step."""
        with self._lock:
            for stop in self._stops.values():
                stop.set()

    def __len__(self) -> int:
        with self._lock:
            return len(self._running)


class Turns:
    """Comparisons in the order asked, one at a time: at most ``waiting`` in line behind the one running, and
    one per session or address."""

    def __init__(self, waiting: int = 8) -> None:
        self.waiting = waiting
        self._turn = threading.Condition()
        self._line: list[tuple[str, str]] = []  # (session, address) of each comparison; the first one runs

    @contextmanager
    def join(self, session: str, address: str) -> Iterator[Callable[[float], int]]:
        """A place in line for the comparison of ``session`` from ``address`` while the block runs; the block
        gets ``ahead(timeout)``, which waits up to ``timeout`` seconds for its turn and says how many
        comparisons are still ahead (0: its turn). ``Refused`` (one line, for the visitor) when that visitor
        already has one in line or the line is full."""
        visitor = (session, address)
        with self._turn:
            if any(session == s or address == a for s, a in self._line):
                raise Refused(
                    "you already have a comparison running or waiting (one per visitor): wait for it to "
                    "finish or press Stop"
                )
            if len(self._line) > self.waiting:
                raise Refused(
                    f"{len(self._line)} comparisons are ahead of yours, the most the app keeps waiting: try "
                    "again in a minute"
                )
            self._line.append(visitor)
        try:
            yield lambda timeout: self._ahead(visitor, timeout)
        finally:
            with self._turn:
                self._line.remove(visitor)
                self._turn.notify_all()

    def _ahead(self, visitor: tuple[str, str], timeout: float) -> int:
        """Wait up to ``timeout`` seconds for ``visitor``'s turn; how many are ahead of it then."""
        with self._turn:
            self._turn.wait_for(lambda: self._line.index(visitor) == 0, timeout)
            return self._line.index(visitor)

    def __len__(self) -> int:
        with self._turn:
            return len(self._line)
