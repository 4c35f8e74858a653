"""The prefetch thread: order, bounded look-ahead, producer errors, which sources use it, and
fit/evaluate/predict results identical with and without it."""

import threading
import time
import traceback

import numpy as np
import pytest

import mirrorfit as mf
from mirrorfit._src.trainers import prefetch as prefetch_lib
from tests.helpers import tree_equal
from tests.trainers.data_adapters.helpers import BATCH, X, Y, batches


def prefetch_thread_alive() -> bool:
    return any(t.name == "mirrorfit-prefetch" and t.is_alive() for t in threading.enumerate())


def test_prefetcher_yields_in_order_and_runs_at_most_depth_ahead():
    pulled = []

    def source():
        for i in range(10):
            pulled.append(i)
            yield i

    with prefetch_lib.Prefetcher(source()) as ahead:
        time.sleep(0.2)
        # DEPTH items queued plus one the producer holds while waiting for room.
        assert len(pulled) <= prefetch_lib.DEPTH + 1
        assert list(ahead) == list(range(10))


def test_producer_exception_reaches_the_caller_with_its_traceback():
    def failing_source():
        yield 1
        raise KeyError("broken record")

    ahead = prefetch_lib.Prefetcher(failing_source())
    assert next(ahead) == 1
    with pytest.raises(KeyError, match="broken record") as info:
        next(ahead)
    frames = [frame.name for frame in traceback.extract_tb(info.value.__traceback__)]
    assert "failing_source" in frames  # the frame that raised, in the producer thread


def test_close_stops_the_thread_before_the_source_ends():
    ahead = prefetch_lib.Prefetcher(iter(range(10**9)))
    next(ahead)
    ahead.close()
    assert not prefetch_thread_alive()


def test_fit_evaluate_predict_identical_with_and_without_prefetch(model_and_initial):
    model, initial = model_and_initial
    results = []
    for enabled in (True, False):
        model.trainer.prefetch = enabled
        model.set_weights(initial)
        history = model.fit(batches(), epochs=1, verbose=0, validation_data=batches())
        results.append((model.get_weights(), history.history,
                        model.evaluate(X, Y, batch_size=BATCH, verbose=0),
                        model.predict(batches(), verbose=0)))
    model.trainer.prefetch = True
    (w1, h1, e1, p1), (w2, h2, e2, p2) = results
    tree_equal(w1, w2)  # bitwise: same batches, same order
    assert h1 == h2 and e1 == e2
    np.testing.assert_array_equal(p1, p2)


def test_failing_generator_in_fit_raises_its_error_and_keeps_the_last_good_state(
        model_and_initial, allclose):
    model, initial = model_and_initial

    def failing_batches():
        yield from list(batches())[:2]
        raise RuntimeError("bad file on disk")

    model.set_weights(initial)
    with pytest.raises(RuntimeError, match="bad file on disk") as info:
        model.fit(failing_batches(), epochs=1, verbose=0)
    frames = [frame.name for frame in traceback.extract_tb(info.value.__traceback__)]
    assert "failing_batches" in frames
    after_error = model.get_weights()
    model.set_weights(initial)
    model.fit(X[:2 * BATCH], Y[:2 * BATCH], batch_size=BATCH, epochs=1, shuffle=False,
              verbose=0)
    allclose(after_error, model.get_weights(), rtol=1e-6, atol=1e-7)  # both good steps


def test_a_generator_is_run_on_the_thread_and_arrays_on_the_calling_thread(model_and_initial):
    model, initial = model_and_initial
    seen = {}

    class ThreadProbe(mf.callbacks.Callback):
        def __init__(self, kind):
            super().__init__()
            self.kind = kind

        def on_train_batch_end(self, batch, logs=None):
            seen.setdefault(self.kind, prefetch_thread_alive())

    model.set_weights(initial)
    model.fit(batches(), epochs=1, verbose=0, callbacks=[ThreadProbe("generator")])
    model.fit(X, Y, batch_size=BATCH, epochs=1, verbose=0, callbacks=[ThreadProbe("arrays")])
    assert seen == {"generator": True, "arrays": False}
