"""The solvers of the WS term by name (``vqwae.ot.catalog`` names them), and ``build_solver``."""
from __future__ import annotations

from importlib import import_module

from vqwae.ot.catalog import SOLVER_CLASSES
from vqwae.ot.transport import Solver

SOLVERS: dict[str, type[Solver]] = {name: getattr(import_module(f"vqwae.ot.{name}"), cls)
                                    for name, cls in SOLVER_CLASSES.items()}
"""Every OT solver class by the name a config's ``solver`` gives it ("semidiscrete", "exact", "sinkhorn", "dual");
:func:`build_solver` builds one from a config."""


def build_solver(config, groups: int) -> Solver:
    """The solver named by ``config.solver`` with its options from ``config`` (a PaperWassersteinConfig), for
    ``groups`` groups (positions, or 1 when pi is shared)."""
    common = dict(groups=groups, num_codes=config.num_codes, shared=config.num_positions is None,
                  global_batch=config.global_batch)
    if config.solver == "semidiscrete":
        return SOLVERS["semidiscrete"](**common)
    if config.solver == "sinkhorn":
        return SOLVERS["sinkhorn"](**common, epsilon=config.epsilon, iterations=config.sinkhorn_iters,
                                   tol=config.sinkhorn_tol, warm_start=config.warm_start)
    if config.solver == "dual":
        eps = {} if config.dual_epsilon is None else {"epsilon": config.dual_epsilon}  # None: the solver's default
        return SOLVERS["dual"](**common, **eps, dim=config.dim, iterations=config.phi_iterations,
                               hidden=config.phi_hidden, lr=config.phi_lr)
    if config.solver == "exact":
        return SOLVERS["exact"](**common)
    raise ValueError(f"unknown solver {config.solver!r}; valid: {', '.join(map(repr, SOLVERS))}")
