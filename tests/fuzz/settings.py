"""How much the fuzz tests explore: bounded and replayable in `make test`, wider on request.

`make test` runs each property on the same derandomized examples every time, with hypothesis' example
database off, so a run is reproducible and its length known in advance. For an exploratory run:

* `CRCR_FUZZ_EXAMPLES=N`: N examples per property (schemathesis: N generated requests per operation and
  mode) instead of each test's default;
* `CRCR_FUZZ_SEED=random` explores new ground every run (a failing test's report names the seed it used);
  `CRCR_FUZZ_SEED=<integer>` replays one such run.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from typing import TypeVar

from hypothesis import HealthCheck, seed, settings

F = TypeVar("F", bound=Callable[..., object])

EXAMPLES = os.environ.get("CRCR_FUZZ_EXAMPLES", "").strip()
SEED = os.environ.get("CRCR_FUZZ_SEED", "").strip()
# One seed for the whole run, drawn once when asked for a random one, so that run can be replayed.
SEED_VALUE: int | None = random.SystemRandom().randrange(2**32) if SEED == "random" else int(SEED) if SEED else None


def examples(default: int) -> int:
    """The number of examples a property runs: `default`, or CRCR_FUZZ_EXAMPLES when set."""
    return int(EXAMPLES) if EXAMPLES else default


def fuzz_settings(default_examples: int) -> settings:
    return settings(
        max_examples=examples(default_examples),
        database=None,
        derandomize=not SEED,
        deadline=None,
        print_blob=True,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.filter_too_much,
            HealthCheck.function_scoped_fixture,
            HealthCheck.large_base_example,
        ],
    )


def fuzz(default_examples: int) -> Callable[[F], F]:
    """`fuzz_settings`, plus the run's seed when CRCR_FUZZ_SEED is set (random, or a replay)."""

    def wrap(test: F) -> F:
        wrapped = fuzz_settings(default_examples)(test)
        if SEED_VALUE is not None:
            wrapped = seed(SEED_VALUE)(wrapped)
        return wrapped

    return wrap
