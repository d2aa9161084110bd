"""Optimal transport between latents and a weighted codebook: costs, the code histogram, and the solvers of the
WS term (semi-discrete, the fast default; exact; Sinkhorn; the paper's network semi-dual), each a module with its
own state behind one interface (``vqwae.ot.transport``)."""
from vqwae.ot.cost import nearest_code, squared_distances, transport_cost
from vqwae.ot.dual import DualSolver, KantorovichPotential, semi_dual
from vqwae.ot.exact import ExactSolver, exact_plans
from vqwae.ot.histogram import code_histogram, perplexity_from_counts
from vqwae.ot.semidiscrete import (Assignment, SemiDiscreteSolver, ascend_potential, assign, assignment_mass,
                                   default_potential_lr, fit_potential, semi_dual_value)
from vqwae.ot.sinkhorn import SinkhornResult, SinkhornSolver, entropic_ot_value, sinkhorn_log
from vqwae.ot.transport import Solver, Transport

SOLVERS = {"semidiscrete": SemiDiscreteSolver, "exact": ExactSolver, "sinkhorn": SinkhornSolver, "dual": DualSolver}


def build_solver(config, groups: int) -> Solver:
    """The solver named by ``config.solver`` with its options from ``config`` (a PaperWassersteinConfig), for
    ``groups`` groups (positions, or 1 when pi is shared)."""
    common = dict(groups=groups, num_codes=config.num_codes, shared=config.num_positions is None,
                  global_batch=config.global_batch)
    if config.solver == "semidiscrete":
        return SemiDiscreteSolver(**common)
    if config.solver == "sinkhorn":
        return SinkhornSolver(**common, epsilon=config.epsilon, iterations=config.sinkhorn_iters,
                              tol=config.sinkhorn_tol, warm_start=config.warm_start)
    if config.solver == "dual":
        return DualSolver(**common, dim=config.dim, epsilon=config.epsilon, iterations=config.phi_iterations,
                          hidden=config.phi_hidden, lr=config.phi_lr)
    if config.solver == "exact":
        return ExactSolver(**common)
    raise ValueError(f"unknown solver {config.solver!r}; valid: {', '.join(map(repr, SOLVERS))}")


__all__ = [
    "nearest_code", "squared_distances", "transport_cost", "exact_plans", "sinkhorn_log", "SinkhornResult",
    "entropic_ot_value", "semi_dual", "KantorovichPotential", "assign", "assignment_mass", "ascend_potential",
    "semi_dual_value", "fit_potential", "default_potential_lr", "code_histogram", "perplexity_from_counts", "Solver",
    "Transport", "Assignment", "SemiDiscreteSolver", "ExactSolver", "SinkhornSolver", "DualSolver", "SOLVERS", "build_solver",
]
