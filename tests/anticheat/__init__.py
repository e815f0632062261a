"""Anti-cheat tests: hacks planted in solutions, honest solutions, containment, the
evaluator's self-check (a package, so its module names never collide with other tests)."""
