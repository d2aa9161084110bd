"""Optimal transport between latents and a weighted codebook: costs, the code histogram, and the solvers of the
WS term (semi-discrete, the fast default; exact; Sinkhorn; the paper's network semi-dual), each a module with its
own state behind one interface (``vqwae.ot.transport``)."""
from typing import TYPE_CHECKING

from vqwae.lazy import attach

if TYPE_CHECKING:  # the exports, imported on first use (vqwae.lazy), in the API reference's order
    from vqwae.ot.cost import nearest_code, squared_distances, transport_cost
    from vqwae.ot.dual import DualSolver, KantorovichPotential, semi_dual
    from vqwae.ot.exact import ExactSolver, exact_plans
    from vqwae.ot.histogram import code_histogram, perplexity_from_counts
    from vqwae.ot.semidiscrete import (Assignment, SemiDiscreteSolver, ascend_potential, assign, assignment_mass,
                                       default_potential_lr, fit_potential, semi_dual_value)
    from vqwae.ot.sinkhorn import SinkhornResult, SinkhornSolver, entropic_ot_value, sinkhorn_log
    from vqwae.ot.transport import Solver, Transport
    from vqwae.ot.registry import SOLVERS, build_solver

__all__ = [
    "nearest_code", "squared_distances", "transport_cost", "exact_plans", "sinkhorn_log", "SinkhornResult",
    "entropic_ot_value", "semi_dual", "KantorovichPotential", "assign", "assignment_mass", "ascend_potential",
    "semi_dual_value", "fit_potential", "default_potential_lr", "code_histogram", "perplexity_from_counts", "Solver",
    "Transport", "Assignment", "SemiDiscreteSolver", "ExactSolver", "SinkhornSolver", "DualSolver", "SOLVERS", "build_solver",
]
__getattr__, __dir__ = attach(__name__)
