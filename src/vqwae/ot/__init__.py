"""Optimal transport between latents and a weighted codebook: costs, semi-discrete (the fast default), exact,
Sinkhorn, and the paper's network semi-dual."""
from vqwae.ot.cost import nearest_code, squared_distances, transport_cost
from vqwae.ot.dual import KantorovichPotential, semi_dual
from vqwae.ot.exact import exact_plans
from vqwae.ot.semidiscrete import ascend_potential, assign, assignment_mass, fit_potential, semi_dual_value
from vqwae.ot.sinkhorn import SinkhornResult, entropic_ot_value, sinkhorn_log

__all__ = [
    "nearest_code", "squared_distances", "transport_cost", "exact_plans", "sinkhorn_log",
    "SinkhornResult", "entropic_ot_value", "semi_dual", "KantorovichPotential",
    "assign", "assignment_mass", "ascend_potential", "semi_dual_value", "fit_potential",
]
