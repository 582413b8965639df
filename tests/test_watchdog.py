"""The watchdog behind every statement's time limit: fires armed deadlines, never disarmed
ones, from one thread however many statements arm it."""

from __future__ import annotations

import math
import threading
import time

from dpsql.engine.watchdog import Watchdog


def test_an_armed_deadline_fires_once_and_a_disarmed_one_never():
    dog = Watchdog()
    fired: list[str] = []
    done = threading.Event()
    dog.arm(0.05, lambda: (fired.append("kept"), done.set()))
    token = dog.arm(0.02, lambda: fired.append("disarmed"))
    dog.disarm(token)
    assert done.wait(5)
    time.sleep(0.1)
    assert fired == ["kept"]


def test_deadlines_fire_in_order_and_one_thread_serves_them_all():
    dog = Watchdog()
    order: list[float] = []
    done = threading.Event()
    before = threading.active_count()
    for delay in (0.12, 0.03, 0.08):
        dog.arm(delay, lambda d=delay: (order.append(d), len(order) == 3 and done.set()))
    for _ in range(500):  # statements that finish in time: arm and disarm, no thread each
        dog.disarm(dog.arm(30.0, lambda: order.append(-1.0)))
    assert threading.active_count() <= before + 1
    assert done.wait(5)
    assert order == [0.03, 0.08, 0.12]


def test_later_deadlines_do_not_wake_the_thread():
    """Statements under one time limit arm ever later deadlines: none of them wakes the thread
    (a wake-up per statement cost most of a small query's fixed cost); an earlier one does."""
    dog = Watchdog()
    first = dog.arm(30.0, lambda: None)
    for _ in range(100):
        if dog._wakes_at > -math.inf:  # the thread sleeps until the first deadline
            break
        time.sleep(0.01)
    woken: list[int] = []
    notify = dog._cond.notify
    dog._cond.notify = lambda n=1: (woken.append(n), notify(n))  # type: ignore[method-assign]
    for _ in range(200):
        dog.disarm(dog.arm(31.0, lambda: None))
    assert woken == []
    done = threading.Event()
    dog.arm(0.02, done.set)
    assert woken == [1] and done.wait(5)
    dog.disarm(first)
