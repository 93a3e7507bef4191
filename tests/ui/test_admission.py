"""How visitors share the machine: comparisons take turns in the order asked, one per visitor; live runs are
admitted or refused at once."""

from __future__ import annotations

import threading
import time

import pytest

from iss.ui import admission


def test_comparisons_take_turns_in_the_order_asked() -> None:
    turns, order = admission.Turns(waiting=4), []
    first = turns.join("s1", "a1")
    ahead = first.__enter__()
    assert ahead(0) == 0  # nobody ahead: its turn at once

    def compare(session: str, address: str) -> None:
        with turns.join(session, address) as wait:
            while wait(0.05) > 0:
                pass
            order.append(session)

    threads = []
    for i in (2, 3, 4):
        threads.append(threading.Thread(target=compare, args=(f"s{i}", f"a{i}")))
        threads[-1].start()
        while len(turns) < i:  # in line before the next one asks
            time.sleep(0.01)
    time.sleep(0.2)
    assert order == [] and len(turns) == 4  # all wait while the first runs
    first.__exit__(None, None, None)
    for thread in threads:
        thread.join(5)
    assert order == ["s2", "s3", "s4"] and len(turns) == 0


@pytest.mark.parametrize("again", [("s1", "a2"), ("s2", "a1")], ids=["same session", "same address"])
def test_a_visitor_holds_one_place_in_line(again: tuple[str, str]) -> None:
    turns = admission.Turns()
    with turns.join("s1", "a1"):
        with (
            pytest.raises(admission.Refused, match=r"^you already have a comparison running or waiting"),
            turns.join(*again),
        ):
            pass
        assert len(turns) == 1
    with turns.join(*again) as ahead:  # once the first has ended
        assert ahead(0) == 0


def test_a_full_line_refuses_at_once_and_frees_a_place_as_it_moves() -> None:
    turns = admission.Turns(waiting=2)
    places = [turns.join(f"s{i}", f"a{i}") for i in range(3)]  # one running, two waiting
    for place in places:
        place.__enter__()
    began = time.monotonic()
    with (
        pytest.raises(admission.Refused, match=r"^3 comparisons are ahead of yours, the most the app keeps"),
        turns.join("s9", "a9"),
    ):
        pass
    assert time.monotonic() - began < 0.5
    places[0].__exit__(None, None, None)
    with turns.join("s9", "a9") as ahead:
        assert ahead(0) == 2
    for place in places[1:]:
        place.__exit__(None, None, None)


def test_a_comparison_that_fails_leaves_the_line() -> None:
    turns = admission.Turns()
    with pytest.raises(RuntimeError), turns.join("s1", "a1"):
        raise RuntimeError("the comparison failed")
    assert len(turns) == 0


def test_one_live_run_per_visitor_and_per_slot() -> None:
    runs = admission.LiveRuns(slots=1)
    with runs.admit("s1", "a1", threading.Event()):
        with (
            pytest.raises(admission.Refused, match=r"^you already have a live run going"),
            runs.admit("s2", "a1", threading.Event()),
        ):
            pass
        with (
            pytest.raises(admission.Refused, match=r"^the machine's live-run slot is taken"),
            runs.admit("s2", "a2", threading.Event()),
        ):
            pass
    with runs.admit("s2", "a2", threading.Event()):
        assert len(runs) == 1
