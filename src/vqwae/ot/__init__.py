"""Optimal transport between a batch of latents and a weighted codebook: costs, exact, Sinkhorn, semi-dual."""
from vqwae.ot.cost import nearest_code, squared_distances, transport_cost
from vqwae.ot.dual import KantorovichPotential, semi_dual
from vqwae.ot.exact import exact_plans
from vqwae.ot.sinkhorn import SinkhornResult, entropic_ot_value, sinkhorn_log

__all__ = [
    "nearest_code", "squared_distances", "transport_cost", "exact_plans", "sinkhorn_log",
    "SinkhornResult", "entropic_ot_value", "semi_dual", "KantorovichPotential",
]
