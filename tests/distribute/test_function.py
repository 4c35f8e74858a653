"""``@mf.function``: a step calling ``strategy.run`` stays Python (run compiles), any other
step is compiled as a whole with its Variables lifted; both assign the variables back.

Counts of how often the Python body runs show what is traced and what is reused; values are
checked against NumPy (float32, rtol 1e-6).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mirrorfit as mf

RTOL = 1e-6


def test_function_without_run_compiles_once_and_assigns_its_variables():
    total = mf.Variable(jnp.zeros(3), name="total")
    steps = mf.Variable(jnp.asarray(0, jnp.int32), name="steps")
    bodies = []

    @mf.function
    def accumulate(x):
        bodies.append(1)
        total.assign_add(jnp.sum(x, axis=0))
        steps.assign_add(1)
        return total.value.sum()

    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    outs = [float(accumulate(x)) for _ in range(5)]
    np.testing.assert_allclose(total.numpy(), 5 * x.sum(0), rtol=RTOL)
    assert int(steps.numpy()) == 5
    np.testing.assert_allclose(outs, [15.0 * k for k in range(1, 6)], rtol=RTOL)
    # The first call runs as Python; the second traces once to find the variables and once
    # to compile; later calls reuse the program.
    assert len(bodies) == 3 and accumulate.num_compiled == 1
    accumulate(np.ones((4, 3), np.float32))  # a new shape: a new compile
    assert accumulate.num_compiled == 2


def test_function_calling_run_stays_python_and_run_compiles_the_replica_function():
    strategy = mf.MirroredStrategy(jax.devices()[:2])
    with strategy.scope():
        total = mf.Variable(jnp.zeros(()), name="total", aggregation="sum")
    bodies = []

    def replica_fn(x):
        total.assign_add(jnp.sum(x))
        return jnp.sum(x)

    @mf.function(jit_compile=True, reduce_retracing=True, autograph=False,
                 input_signature=[None])
    def distributed_step(batch):
        bodies.append(1)
        return strategy.reduce(mf.ReduceOp.SUM, strategy.run(replica_fn, args=(batch,)),
                               axis=None)

    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    (batch,) = strategy.experimental_distribute_dataset([x])
    for _ in range(3):
        np.testing.assert_allclose(distributed_step(batch), x.sum(), rtol=RTOL)
    np.testing.assert_allclose(total.numpy(), 3 * x.sum(), rtol=RTOL)
    assert len(bodies) == 3  # Python every call
    assert strategy._runner.num_compiled == 1


def test_function_decorating_a_method_binds_the_instance():
    class Counter:
        def __init__(self):
            self.count = mf.Variable(jnp.zeros(()), name="count")

        @mf.function
        def add(self, x):
            self.count.assign_add(x)

    first, second = Counter(), Counter()
    for _ in range(3):
        first.add(jnp.asarray(2.0))
    second.add(jnp.asarray(5.0))
    assert float(first.count.numpy()) == 6.0 and float(second.count.numpy()) == 5.0


def test_function_called_inside_a_trace_is_the_plain_function():
    strategy = mf.MirroredStrategy(jax.devices()[:2])

    @mf.function
    def double(x):
        return 2 * x

    def replica_fn(x):
        return double(x) + 1

    out = strategy.run(replica_fn, args=(strategy.replicate(np.ones(2, np.float32)),))
    np.testing.assert_allclose(strategy.reduce("MEAN", out), [3.0, 3.0], rtol=RTOL)
    assert double.num_compiled == 0


def test_function_of_per_replica_values_stays_python_and_caches_nothing():
    strategy = mf.MirroredStrategy(jax.devices()[:2])

    @mf.function
    def total(per_replica):
        return strategy.reduce(mf.ReduceOp.SUM, per_replica, axis=None)

    for k in range(3):
        out = strategy.run(lambda x: x * 2, args=(strategy.replicate(np.float32(k)),))
        np.testing.assert_allclose(total(out), 4.0 * k, rtol=RTOL)
    assert total.num_compiled == 0  # a new PerReplica every step: no cache entry each


def test_function_with_an_iterator_argument_stays_python_and_skips_no_batch():
    seen = mf.Variable(jnp.zeros(()), name="seen")

    @mf.function
    def consume(iterator):
        seen.assign_add(jnp.asarray(next(iterator)).sum())

    iterator = iter([np.float32(k) for k in range(1, 6)])
    for _ in range(5):
        consume(iterator)
    assert float(seen.numpy()) == 15.0  # every batch once, none baked into a program


def test_function_assigning_a_new_variable_each_call_raises_value_error():
    made = []

    @mf.function
    def make_and_assign(x):
        variable = mf.Variable(jnp.zeros(()), name=f"fresh_{len(made)}")
        made.append(variable)
        variable.assign(x)

    make_and_assign(jnp.asarray(1.0))  # Python
    with pytest.raises(ValueError, match=r"make_and_assign assigned variables on a later "
                       r"trace.*create its variables once.*\['fresh_2'\]"):
        make_and_assign(jnp.asarray(1.0))


def test_function_of_a_non_callable_raises_type_error():
    with pytest.raises(TypeError, match=r"mf.function decorates a function.*Received: 3"):
        mf.function(3)
